# Types of the extension module (python/src). Internal: use the classes of
# redlock_client. Every call that takes a `waiter` blocks (GIL released)
# without one and, with (bridge, asyncio future), returns a Task at once and
# resolves the future in the bridge's event loop.
from typing import Any, Callable, List, Optional, Tuple

_Claim = Tuple[str, str, Optional[int]]
_Retry = Tuple[Optional[float], Optional[int], Optional[Tuple[float, float]]]
_Tally = Tuple[int, int, int, int, int, Optional[int], int, int, int, Optional[str], int]
_Holder = Tuple[str, str, int, int, int]
_Info = Tuple[str, str, int, int, int, int, int, Optional[int], List[_Holder]]

_Waiter = Tuple["Bridge", Any]

__version__: str

def shutdown() -> None: ...
def freed_channel(resource: str, cluster: bool, db: int) -> Tuple[str, str]: ...

class Task:
    def cancel(self) -> None: ...

class Bridge:
    def __init__(self) -> None: ...
    def fileno(self) -> int: ...
    def drain(self) -> None: ...

class Held:
    @property
    def resource(self) -> str: ...
    @property
    def token(self) -> str: ...
    @property
    def resources(self) -> List[_Claim]: ...
    @property
    def fencing_token(self) -> Optional[int]: ...
    def status(self) -> Tuple[str, float, str]: ...
    def fence(self, waiter: Optional[_Waiter] = None) -> Any: ...
    def extend(self, ttl: Optional[float] = None, waiter: Optional[_Waiter] = None) -> Any: ...
    def release(self, waiter: Optional[_Waiter] = None) -> Any: ...
    def detach(self, waiter: Optional[_Waiter] = None) -> Any: ...
    def start_watchdog(
        self, renewals_max: int, duration_max: float, waiter: Optional[_Waiter] = None
    ) -> Any: ...
    def on_lost(self, callback: Callable[[Any], Any], bridge: Optional[Bridge] = None) -> None: ...

class Client:
    def __init__(
        self,
        nodes: List[str],
        connect_timeout: float,
        command_timeout: float,
        reconnect_backoff: float,
        tls: Optional[
            Tuple[Optional[str], Optional[str], Optional[str], Optional[str], Optional[str], bool]
        ] = None,
    ) -> None: ...
    @property
    def nodes(self) -> List[str]: ...
    @property
    def majority(self) -> int: ...
    def quorum(self, mode_name: str, permits: Optional[int] = None) -> int: ...
    def acquire(
        self,
        claims: List[_Claim],
        many: bool,
        ttl: float,
        fence: bool,
        retry: Optional[_Retry] = None,
        waiter: Optional[_Waiter] = None,
    ) -> Any: ...
    def release(
        self,
        resources: List[str],
        many: bool,
        token: str,
        mode_name: str = "plain",
        permits: Optional[int] = None,
        waiter: Optional[_Waiter] = None,
    ) -> Any: ...
    def extend(
        self,
        resources: List[str],
        many: bool,
        token: str,
        ttl: float,
        mode_name: str = "plain",
        permits: Optional[int] = None,
        waiter: Optional[_Waiter] = None,
    ) -> Any: ...
    def enter(
        self, resource: str, owner: str, ttl: float, waiter: Optional[_Waiter] = None
    ) -> Any: ...
    def exit(self, resource: str, owner: str, waiter: Optional[_Waiter] = None) -> Any: ...
    def info(self, resource: str, waiter: Optional[_Waiter] = None) -> Any: ...
    def status(self, waiter: Optional[_Waiter] = None) -> Any: ...
    def settle(self, waiter: Optional[_Waiter] = None) -> Any: ...

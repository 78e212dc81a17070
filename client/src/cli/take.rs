//! Taking the lock for `acquire` and `exec`: one resource or a set, within
//! the `--wait` retries, with the fencing round unless `--no-fence`.

use std::time::Duration;

use redlock_client::{Error, Guard, Mode, Redlock, RetryPolicy};

/// `--wait`: one attempt for 0, else retries for up to that long.
pub fn retry_policy(wait: Duration) -> RetryPolicy {
    if wait.is_zero() {
        RetryPolicy::attempts(1)
    } else {
        RetryPolicy::within(wait)
    }
}

pub fn names(resources: &[(String, Mode)]) -> Vec<&str> {
    resources.iter().map(|(resource, _)| resource.as_str()).collect()
}

/// What messages call the resources: the one, or `{a, b, c}` for a set.
pub fn label(resources: &[(String, Mode)]) -> String {
    match resources {
        [(one, _)] => one.clone(),
        set => format!("{{{}}}", names(set).join(", ")),
    }
}

/// Takes the lock (one resource, or the set all or nothing) within
/// `policy`, and with `fenced` its fencing token too: an attempt whose
/// fencing round fails is released and retried like one whose grant
/// failed (as when the fencing round was part of every acquire). A fencing
/// round that ends past the validity counts as the rounds taking too long
/// (`ExpiredBeforeUse`, retried), as it did then. An attempt that the nodes
/// refuse as a bad call (`ERR ... out of range`, `WRONGTYPE`, the module
/// not loaded) is not retried: the library's `Error::Refused` is not
/// retryable.
pub async fn take(
    redlock: &Redlock,
    resources: &[(String, Mode)],
    ttl: Duration,
    policy: &RetryPolicy,
    fenced: bool,
) -> Result<(Guard, Option<u64>), Error> {
    policy.retry(|| attempt(redlock, resources, ttl, fenced)).await
}

async fn attempt(
    redlock: &Redlock,
    resources: &[(String, Mode)],
    ttl: Duration,
    fenced: bool,
) -> Result<(Guard, Option<u64>), Error> {
    let guard = match resources {
        [(resource, mode)] => redlock.try_acquire(resource, *mode, ttl).await?,
        set => redlock.try_acquire_many(set, ttl).await?,
    };
    if !fenced {
        return Ok((guard, None));
    }
    match guard.fencing_token().await {
        Ok(fence) => Ok((guard, Some(fence))),
        Err(error) => {
            let elapsed = guard.lease().start.elapsed();
            let _ = guard.release().await;
            Err(match error {
                Error::Lost { resource, .. } => {
                    let drift = redlock_client::quorum::drift(ttl);
                    Error::ExpiredBeforeUse { resource, ttl, elapsed, drift }
                }
                other => other,
            })
        }
    }
}

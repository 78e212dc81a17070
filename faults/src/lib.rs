//! The Jepsen-style safety suite's parts (the suite is `tests/jepsen.rs`): the
//! nodes and their faults (`cluster`, `proxy`; members that are Redis
//! Clusters and the faults inside them: `sharded`), the scenarios and the
//! nemesis with its probes (`scenario`, `nemesis`), the clients (`worker`
//! for the quorum client and the contrast recipes in `classic`, `onenode`
//! for one node spoken to directly, `misuse`), the history and its checker.

pub mod checker;
pub mod classic;
pub mod cluster;
pub mod conn;
pub mod history;
pub mod misuse;
pub mod nemesis;
pub mod onenode;
pub mod proxy;
pub mod scenario;
pub mod sharded;
pub mod worker;

mod common;
use common::*;

#[test]
fn module_loads_and_grants() {
    let s = Server::start();
    let mut c = s.conn();
    let t: i64 = cmd("LOCK.ACQUIRE")
        .arg("k")
        .arg("t")
        .arg(1000)
        .query(&mut c)
        .unwrap();
    assert!(t > 0);
}

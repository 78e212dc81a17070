//! Quorum members: one master, or one cluster.

mod gate;
mod redirect;
mod slot;
mod topology;

//! Robustness tools: the crash soak and the network fuzzer.

pub mod chaos; // `chaos`: the crash soak (kill -9 of random servers under fsync'ed writers, read back, fsck, ENOSPC)
pub mod failover; // `failover`: metadata replicas' leader killed or paused under mdtest; nothing acknowledged lost
pub mod fuzz; // `fuzz`: mutated frames over real QUIC + mutual TLS to a running server, which must stay up and bounded

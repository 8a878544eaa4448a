//! Prometheus metrics of Tessera's servers: each builds a `prometheus_client` [`Registry`] (metrics it
//! updates, and collectors computing values from live state at scrape time) and serves it on
//! `GET /metrics` in the OpenMetrics text format.
//!
//! - [`scrape`]: rendering a registry, and collectors written as closures over live state.
//! - [`endpoint`]: the HTTP endpoint (hyper) serving a registry until shut down.
//!
//! [`Registry`]: prometheus_client::registry::Registry

pub mod endpoint;
pub mod scrape;

pub use endpoint::Endpoint;
pub use prometheus_client;
pub use scrape::{collector, render, Scrape, CONTENT_TYPE};

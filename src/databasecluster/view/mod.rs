//! What a user sees of the clusters outside `kubectl`: the live page's row per cluster
//! ([`ClusterView`], registered by `Operator::register`; the row itself is [`rows`]'s pure
//! function) and how old each figure is ([`age`], which `status` uses too).
//!
//! The view reads the operator's cache, never the API, and renders only the page of clusters the
//! live page asks for, so a refresh costs the decoding of one page of clusters.

pub mod age;
pub mod rows;

use std::sync::Arc;

use jiff::Timestamp;

use crate::databasecluster::api::types::DatabaseCluster;
use crate::databasecluster::cache::cached::Compact;
use crate::runtime::cache::Cache;
use crate::runtime::observe::introspection::{Cell, ObjectRow, ObjectTable, ObjectView, page_of_keys};

/// The live page's view of the DatabaseClusters in the operator's cache.
pub struct ClusterView {
    controller: String,
    clusters: Arc<Cache<Compact<DatabaseCluster>>>,
}

impl ClusterView {
    /// The clusters of `clusters`, the cache of the controller named `controller`.
    pub fn new(controller: &str, clusters: Arc<Cache<Compact<DatabaseCluster>>>) -> Self {
        ClusterView { controller: controller.to_owned(), clusters }
    }
}

impl std::fmt::Debug for ClusterView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterView").field("controller", &self.controller).finish_non_exhaustive()
    }
}

impl ObjectView for ClusterView {
    fn controller(&self) -> &str {
        &self.controller
    }

    fn table(&self, filter: &str, offset: usize, limit: usize) -> ObjectTable {
        let keys = self.clusters.keys().iter().map(ToString::to_string).collect();
        let (matching, page) = page_of_keys(keys, filter, offset, limit);
        let now = Timestamp::now();
        let rows = page
            .into_iter()
            .filter_map(|key| {
                // A cluster deleted since the keys were read is left out.
                let cached = self.clusters.get(&key.parse().unwrap_or_else(|never| match never {}))?;
                Some(match cached.expand() {
                    Ok(cluster) => rows::cluster_row(&cluster, now),
                    Err(error) => undecodable(key, &error),
                })
            })
            .collect();
        ObjectTable {
            title: "DatabaseClusters".to_owned(),
            columns: rows::COLUMNS.iter().map(|c| (*c).to_owned()).collect(),
            matching,
            rows,
        }
    }
}

/// The row of a cached cluster that does not decode: every cell says so.
fn undecodable(key: String, error: &serde_json::Error) -> ObjectRow {
    let cell = Cell::absent(format!("the cached object does not decode: {error}"));
    ObjectRow { key, cells: vec![cell; rows::COLUMNS.len()] }
}

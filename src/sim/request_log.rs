//! The request log: one record per API request, so tests can count writes and compare the
//! requests the operator made with what its RBAC grants.

use parking_lot::Mutex;

/// One API request as RBAC sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestRecord {
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete` or `deletecollection`.
    pub verb: String,
    /// API group, empty for the core group.
    pub group: String,
    /// API version.
    pub version: String,
    /// Plural resource name.
    pub resource: String,
    /// `status`, if the request was for a subresource.
    pub subresource: Option<String>,
    /// The namespace in the path, if any.
    pub namespace: Option<String>,
    /// The object name in the path, if any.
    pub name: Option<String>,
}

/// Append-only log of resource requests (discovery requests are not logged).
#[derive(Debug, Default)]
pub struct RequestLog(Mutex<Vec<RequestRecord>>);

impl RequestLog {
    /// Appends a record.
    pub fn push(&self, record: RequestRecord) {
        self.0.lock().push(record);
    }

    /// A copy of every record so far, oldest first.
    pub fn snapshot(&self) -> Vec<RequestRecord> {
        self.0.lock().clone()
    }
}

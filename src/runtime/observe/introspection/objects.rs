//! What the objects a controller reconciles look like, as its user sees them: an [`ObjectView`]
//! that the operator registers (`Introspection::add_object_view`) and the live page shows, one
//! row per object beside the loop's view of its key.
//!
//! The runtime knows nothing of the objects: the view hands over rows of text cells, already
//! rendered (ages included, computed when asked), under columns it names. A figure the object
//! does not carry is a cell with no text and a note saying so ([`Cell::absent`]), never a guess.

use serde::Serialize;

/// How a cell reads at a glance (a colour on the page).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Tone {
    /// Nothing to note.
    #[default]
    Plain,
    /// As desired.
    Good,
    /// Converging, or worth a look.
    Warn,
    /// Failing.
    Bad,
    /// The object does not carry this figure.
    Absent,
}

impl Tone {
    fn is_plain(&self) -> bool {
        *self == Tone::Plain
    }
}

/// One cell: its text (one figure a line), its tone, and a note (why it is empty, where a figure
/// comes from).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Cell {
    /// What the cell shows; a line per figure.
    pub text: String,
    /// How it reads.
    #[serde(skip_serializing_if = "Tone::is_plain")]
    pub tone: Tone,
    /// Shown small beside the text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl Cell {
    /// A cell showing `text`.
    pub fn text(text: impl Into<String>) -> Self {
        Cell { text: text.into(), ..Cell::default() }
    }

    /// This cell in `tone`.
    pub fn tone(self, tone: Tone) -> Self {
        Cell { tone, ..self }
    }

    /// This cell with `note`.
    pub fn note(self, note: impl Into<String>) -> Self {
        Cell { note: Some(note.into()), ..self }
    }

    /// An empty cell for a figure the object does not carry; `why` says so.
    pub fn absent(why: impl Into<String>) -> Self {
        Cell { text: String::new(), tone: Tone::Absent, note: Some(why.into()) }
    }
}

/// One object: its key (`namespace/name`, as the controller's queue knows it) and its cells,
/// one per column.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ObjectRow {
    /// The object's key.
    pub key: String,
    /// Its cells, in the table's column order.
    pub cells: Vec<Cell>,
}

/// One page of objects, as a view renders them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ObjectTable {
    /// What the objects are (e.g. `DatabaseClusters`).
    pub title: String,
    /// The columns' names, after the key's.
    pub columns: Vec<String>,
    /// How many objects match the filter (the rows are one page of them).
    pub matching: usize,
    /// The page's rows, sorted by key.
    pub rows: Vec<ObjectRow>,
}

/// The operator's view of the objects one controller reconciles. It is asked on every refresh of
/// the live page (so it reads its caches, never the API) and renders only the rows asked for.
pub trait ObjectView: Send + Sync + 'static {
    /// The controller whose keys the objects are: each row is shown beside that controller's
    /// view of the key.
    fn controller(&self) -> &str;

    /// The objects whose key contains `filter`, sorted by key: how many match, and the rows
    /// from `offset`, at most `limit` of them.
    fn table(&self, filter: &str, offset: usize, limit: usize) -> ObjectTable;
}

/// The page `offset..offset + limit` of `keys` containing `filter`, sorted, with how many match:
/// the selection every view makes before rendering rows.
pub fn page_of_keys(
    mut keys: Vec<String>,
    filter: &str,
    offset: usize,
    limit: usize,
) -> (usize, Vec<String>) {
    keys.retain(|key| key.contains(filter));
    keys.sort_unstable();
    let matching = keys.len();
    (matching, keys.into_iter().skip(offset).take(limit).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_of_keys_is_filtered_sorted_and_counted() {
        let keys = ["b/pg", "a/pg", "a/other", "c/pg"].map(String::from).to_vec();
        assert_eq!(page_of_keys(keys.clone(), "pg", 0, 2), (3, vec!["a/pg".into(), "b/pg".into()]));
        assert_eq!(page_of_keys(keys.clone(), "pg", 2, 2), (3, vec!["c/pg".into()]));
        assert_eq!(page_of_keys(keys, "", 9, 2), (4, vec![]));
    }

    #[test]
    fn an_absent_figure_is_an_empty_cell_that_says_so() {
        let cell = Cell::absent("not in the status");
        assert_eq!((cell.text.as_str(), cell.tone), ("", Tone::Absent));
        let json = serde_json::to_value(Cell::text("Running").tone(Tone::Good)).unwrap();
        assert_eq!(json, serde_json::json!({"text": "Running", "tone": "good"}));
        assert_eq!(serde_json::to_value(Cell::text("x")).unwrap(), serde_json::json!({"text": "x"}));
    }
}

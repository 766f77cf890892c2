//! The demo's keys, as pure data: which cluster is selected, what a key press asks for (`s`: the
//! selected cluster's status, the view `dbcluster-operator status` prints; `n` or Tab: select the
//! next cluster; `h` or `?`: the keys), and how the status view is framed between the table's
//! rows. No I/O: `cli::demo` reads the keys and fetches the status.

/// What the keys do, printed at start and on `h`.
pub const HELP: &str =
    "Keys: s = status of the selected cluster, n = select the next cluster, h = these keys.";

/// What a key press asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Show the status of `namespace/name`.
    Status {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
    /// `namespace/name` is now selected.
    Selected {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
    /// There is no cluster to show or select.
    NoCluster,
    /// Print [`HELP`].
    Help,
    /// Nothing (an unbound key, Enter).
    Nothing,
}

/// The selected cluster: the first one until `n` moves on; if it goes away, the first again.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selection {
    current: Option<(String, String)>,
}

impl Selection {
    /// What `key` asks for among `clusters` (namespace, name; in the table's order).
    pub fn press(&mut self, key: u8, clusters: &[(String, String)]) -> Action {
        let at = self.current.as_ref().and_then(|c| clusters.iter().position(|k| k == c));
        let chosen = match key {
            b's' | b'S' => at.or((!clusters.is_empty()).then_some(0)),
            b'n' | b'N' | b'\t' => match at {
                Some(i) => Some((i + 1) % clusters.len()),
                None => (!clusters.is_empty()).then_some(0),
            },
            b'h' | b'H' | b'?' => return Action::Help,
            _ => return Action::Nothing,
        };
        let Some(index) = chosen else { return Action::NoCluster };
        let (namespace, name) = clusters[index].clone();
        self.current = Some((namespace.clone(), name.clone()));
        if key.eq_ignore_ascii_case(&b's') {
            Action::Status { namespace, name }
        } else {
            Action::Selected { namespace, name }
        }
    }
}

/// How wide the rules around the status view are.
const RULE_WIDTH: usize = 100;

/// The status view `text` of `namespace/name`, between rules so that it stands out from the
/// table's rows.
pub fn status_block(namespace: &str, name: &str, text: &str) -> String {
    let title = format!("── status of {namespace}/{name} (dbcluster-operator status {name} -n {namespace}) ");
    let fill = RULE_WIDTH.saturating_sub(title.chars().count());
    format!("{title}{}\n{}\n{}\n", "─".repeat(fill), text.trim_end(), "─".repeat(RULE_WIDTH))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clusters(names: &[&str]) -> Vec<(String, String)> {
        names.iter().map(|n| ("default".to_owned(), (*n).to_owned())).collect()
    }

    fn status(name: &str) -> Action {
        Action::Status { namespace: "default".into(), name: name.into() }
    }

    #[test]
    fn s_shows_the_selected_cluster_and_n_moves_the_selection_round() {
        let mut selection = Selection::default();
        let three = clusters(&["a", "b", "c"]);
        assert_eq!(selection.press(b's', &three), status("a"), "the first cluster at first");
        assert_eq!(
            selection.press(b'n', &three),
            Action::Selected { namespace: "default".into(), name: "b".into() }
        );
        assert_eq!(selection.press(b'S', &three), status("b"));
        selection.press(b'\t', &three);
        assert_eq!(
            selection.press(b'n', &three),
            Action::Selected { namespace: "default".into(), name: "a".into() }
        );
        assert_eq!(selection.press(b's', &three), status("a"), "round to the first");
    }

    #[test]
    fn a_selected_cluster_that_went_away_falls_back_to_the_first() {
        let mut selection = Selection::default();
        selection.press(b'n', &clusters(&["a", "b"]));
        selection.press(b'n', &clusters(&["a", "b"]));
        assert_eq!(selection.press(b's', &clusters(&["a", "c"])), status("a"));
        assert_eq!(selection.press(b's', &[]), Action::NoCluster);
        assert_eq!(selection.press(b'n', &[]), Action::NoCluster);
    }

    #[test]
    fn other_keys_ask_for_help_or_nothing() {
        let mut selection = Selection::default();
        assert_eq!(selection.press(b'?', &[]), Action::Help);
        assert_eq!(selection.press(b'h', &[]), Action::Help);
        for key in [b'\n', b'\r', b'x', b' '] {
            assert_eq!(selection.press(key, &clusters(&["a"])), Action::Nothing);
        }
    }

    #[test]
    fn the_status_view_is_framed_between_rules() {
        let block = status_block("default", "pg", "Phase:     Running\n\n");
        let lines: Vec<&str> = block.lines().collect();
        assert!(
            lines[0].starts_with("── status of default/pg (dbcluster-operator status pg -n default) ─"),
            "{block}"
        );
        assert_eq!(lines[1], "Phase:     Running");
        assert!(lines[2].chars().all(|c| c == '─'), "{block}");
        assert_eq!(lines.len(), 3, "{block}");
    }
}

//! The Events of the instance operations (rolls, reloads, passwords), as pure data.

use crate::databasecluster::controller::events::{EventNote, EventType};

impl EventNote {
    /// One step of a rolling update: `pod` is deleted so that it comes back updated.
    pub fn rolling_instance(pod: &str, primary: bool, outdated: usize, instances: usize) -> Self {
        let text = if instances == 1 {
            format!(
                "Restarting {pod}, the only instance, for the update: the database is unavailable until it is back"
            )
        } else if primary {
            format!("Restarting the primary {pod} for the update, after every standby")
        } else {
            format!("Restarting standby {pod} for the update ({outdated} of {instances} instances outdated)")
        };
        EventNote::new(EventType::Normal, "RollingUpdate", "Update", text)
    }

    /// A changed configuration was applied by a reload, with no restart.
    pub fn configuration_reloaded(pod: &str) -> Self {
        EventNote::new(
            EventType::Normal,
            "ConfigurationReloaded",
            "Reload",
            format!("{pod} reloaded its configuration"),
        )
    }

    /// The primary reports applying a login's changed Secret (never the password itself).
    pub fn password_applied(user: &str) -> Self {
        EventNote::new(
            EventType::Normal,
            "PasswordApplied",
            "UpdateCredentials",
            format!("The database now accepts the password of the Secret for user {user}"),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_single_instance_roll_says_it_is_a_restart() {
        assert!(EventNote::rolling_instance("db-0", true, 1, 1).note.contains("unavailable"));
        assert!(EventNote::rolling_instance("db-0", true, 1, 3).note.contains("primary"));
        assert!(EventNote::rolling_instance("db-2", false, 3, 3).note.contains("standby db-2"));
    }
}

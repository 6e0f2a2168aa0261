//! The 18 EPP/1 capabilities as the WIT `capabilities` flags, with their wire
//! names. The table is the protocol's (docs/epp-1.md), not any provider's: a
//! provider says which it implements through `needs().capabilities`.

use super::bindings::abx::epp::types::Capabilities;
use super::table::{CAPABILITIES, CAPABILITY_FLAGS};

/// Every capability, in WIT (and documentation) order: wire name and flag.
/// Both come from the WIT `capabilities` flags at build time (host/build.rs).
pub fn all() -> impl Iterator<Item = (&'static str, Capabilities)> {
    CAPABILITIES.iter().copied().zip(CAPABILITY_FLAGS)
}

/// The flag of a wire name; `None` for a name that is not an EPP/1 capability.
pub fn flag(name: &str) -> Option<Capabilities> {
    all().find(|(n, _)| *n == name).map(|(_, f)| f)
}

/// The wire names of the flags set in `flags`, in protocol order.
pub fn names(flags: Capabilities) -> impl Iterator<Item = &'static str> {
    all()
        .filter(move |(_, f)| flags.contains(*f))
        .map(|(n, _)| n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_follows_the_wit_flags() {
        let mut union = Capabilities::empty();
        for (i, (name, flag)) in all().enumerate() {
            // Flag i is bit i, so the table's order is the WIT order.
            assert_eq!(flag.as_array()[0], 1 << i, "{name}");
            // The wire name is the case name (as bindgen spells it) with its
            // first separator turned into `.`.
            let case = format!("{flag:?}")
                .trim_matches(['(', ')'])
                .to_ascii_lowercase()
                .replace('_', "-");
            assert_eq!(case.replacen('-', ".", 1), name);
            union |= flag;
        }
        assert_eq!(union, Capabilities::all());
    }

    #[test]
    fn names_and_flags_round_trip() {
        let some = Capabilities::PTY | Capabilities::EXEC_STREAM;
        assert_eq!(names(some).collect::<Vec<_>>(), ["exec.stream", "pty"]);
        assert_eq!(flag("files.rw"), Some(Capabilities::FILES_RW));
        assert_eq!(flag("files-rw"), None);
        assert_eq!(names(Capabilities::empty()).count(), 0);
    }
}

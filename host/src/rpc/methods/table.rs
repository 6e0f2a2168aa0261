//! The method table, derived from `wit/` at build time (host/build.rs reads the
//! `/// epp: ...` line of every `infra` function; docs/epp-1.md §8).

/// One EPP/1 method, as its WIT function and `epp:` line describe it.
#[derive(Debug)]
pub struct Method {
    /// Wire name, e.g. `sandbox.get_info`.
    pub name: &'static str,
    /// The `infra` function, e.g. `sandbox-get-info`.
    pub function: &'static str,
    /// Wire name of the capability it belongs to.
    pub capability: &'static str,
    /// The key under which a result that is not a record is answered.
    pub result: Option<&'static str>,
    /// Wire names of its params (a lone `req` record's fields), in WIT order.
    pub params: &'static [&'static str],
    /// Those params that are seconds on the wire (`*-ms` in WIT).
    pub seconds: &'static [&'static str],
    /// (param, JSON) used when the param is absent.
    pub defaults: &'static [(&'static str, &'static str)],
    /// (wire name kept for compatibility, param it stands for).
    pub aliases: &'static [(&'static str, &'static str)],
    /// (param, min, max): bounds of integer params.
    pub ranges: &'static [(&'static str, Option<i64>, Option<i64>)],
    /// Served by a hand-written adapter (its answer follows a resource).
    pub stream: bool,
    /// The `infra` function the host calls with each id a call of this method
    /// reported (`request.made`) when the call is abandoned before it returns.
    pub undo: Option<&'static str>,
}

include!(concat!(env!("OUT_DIR"), "/methods.rs"));

/// The method called `name` on the wire.
pub fn find(name: &str) -> Option<&'static Method> {
    METHODS.iter().find(|m| m.name == name)
}

impl Method {
    pub fn has_param(&self, name: &str) -> bool {
        self.params.contains(&name)
    }

    /// The declared default of `param`, if any.
    pub fn default(&self, param: &str) -> Option<&'static str> {
        self.defaults
            .iter()
            .find(|(p, _)| *p == param)
            .map(|(_, json)| *json)
    }

    /// Checks `value` of an integer param against its declared range.
    pub fn check_range(&self, param: &str, value: i128) -> Result<(), String> {
        let Some((_, min, max)) = self.ranges.iter().find(|(p, ..)| *p == param) else {
            return Ok(());
        };
        let (low, high) = (min.map(i128::from), max.map(i128::from));
        if low.is_some_and(|l| value < l) || high.is_some_and(|h| value > h) {
            let bounds = match (min, max) {
                (Some(l), Some(h)) => format!("between {l} and {h}"),
                (Some(l), None) => format!("at least {l}"),
                (None, Some(h)) => format!("at most {h}"),
                (None, None) => unreachable!("a range has a bound"),
            };
            return Err(format!("`{param}` must be {bounds}, got {value}"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_covers_every_capability_and_names_methods_by_the_rule() {
        assert_eq!(CAPABILITIES.len(), 18);
        for cap in CAPABILITIES {
            assert!(
                METHODS.iter().any(|m| m.capability == *cap) || *cap == "exec.stream",
                "no method of {cap}"
            );
        }
        let info = find("sandbox.get_info").expect("sandbox.get_info");
        assert_eq!(info.function, "sandbox-get-info");
        assert_eq!(info.params, ["sandbox_id"]);
        assert!(!info.stream);
        let run = find("commands.run").expect("commands.run");
        assert!(run.stream);
        assert_eq!(run.seconds, ["timeout"]);
        assert!(
            find("commands.start").is_none(),
            "untagged functions are not methods"
        );
        assert_eq!(find("files.list").unwrap().default("depth"), Some("1"));
        assert_eq!(find("sandbox.list").unwrap().aliases, [("state", "states")]);
        assert_eq!(find("sandbox.create").unwrap().undo, Some("sandbox-kill"));
        assert_eq!(find("sandbox.get_info").unwrap().undo, None);
        // Adding a method must not need host code: no count, only the rule.
        for m in METHODS {
            assert_eq!(crate::rpc::codec::names::method(m.function), m.name);
            assert!(CAPABILITIES.contains(&m.capability), "{m:?}");
        }
    }

    #[test]
    fn ranges_name_the_param_and_the_bounds() {
        let resize = find("pty.resize").unwrap();
        assert!(resize.check_range("cols", 80).is_ok());
        assert_eq!(
            resize.check_range("rows", 0).unwrap_err(),
            "`rows` must be between 1 and 1000, got 0"
        );
        assert_eq!(
            find("files.list").unwrap().check_range("depth", 0),
            Err("`depth` must be at least 1, got 0".to_string())
        );
    }
}

//! The languages a sandbox's kernels serve, asked of `jupyter` in the sandbox.

use super::kernels;
use crate::commands;
use crate::error::{self, Result};
use crate::execd::Execd;
use serde::Deserialize;

#[derive(Deserialize)]
struct KernelSpecs {
    kernelspecs: std::collections::BTreeMap<String, KernelSpecEntry>,
}

#[derive(Deserialize)]
struct KernelSpecEntry {
    spec: KernelSpec,
}

#[derive(Deserialize)]
struct KernelSpec {
    language: String,
}

/// The languages of the sandbox's installed Jupyter kernels (what execd
/// matches a context's language against), asked of `jupyter` in the sandbox.
pub fn languages(sandbox_id: &str) -> Result<Vec<String>> {
    let mut execd = Execd::connect(sandbox_id)?;
    kernels::require(&mut execd)?;
    let (code, stdout, stderr) =
        commands::run_to_end(sandbox_id, "jupyter kernelspec list --json", 30_000)?;
    if code != 0 {
        return Err(error::upstream(format!(
            "sandbox {sandbox_id} could not list its Jupyter kernels (`jupyter kernelspec list` \
             exited {code}: {})",
            stderr.trim().chars().take(300).collect::<String>()
        )));
    }
    parse_languages(&stdout).map_err(|e| {
        error::upstream(format!(
            "sandbox {sandbox_id}'s `jupyter kernelspec list --json` printed something \
             unexpected ({e})"
        ))
    })
}

fn parse_languages(json: &str) -> std::result::Result<Vec<String>, serde_json::Error> {
    let specs: KernelSpecs = serde_json::from_str(json)?;
    let mut languages: Vec<String> = specs
        .kernelspecs
        .into_values()
        .map(|k| k.spec.language.to_ascii_lowercase())
        .collect();
    languages.sort();
    languages.dedup();
    Ok(languages)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn languages_come_from_the_kernel_specs() {
        let json = r#"{"kernelspecs":{"python3":{"resource_dir":"/x","spec":{"language":"python","display_name":"Python 3"}},
            "tslab":{"resource_dir":"/y","spec":{"language":"typescript"}},
            "py2":{"resource_dir":"/z","spec":{"language":"Python"}}}}"#;
        assert_eq!(
            parse_languages(json).unwrap(),
            vec!["python".to_string(), "typescript".to_string()]
        );
        assert!(parse_languages("not json").is_err());
    }
}

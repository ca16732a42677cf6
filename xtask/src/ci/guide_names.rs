//! The crate names and versions the guide tells users to add are ours.
//!
//! Every `diesel-outbox-*` dependency in a TOML block of the README or the guide
//! must be a published workspace package whose version the requirement accepts,
//! and the example service must depend on it with the same requirement (path and
//! version), so its tests prove what a user pasting the guide gets.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context as _, bail, ensure};

use super::workspace::Members;

/// The example that depends on the crates the way the guide says.
const DOWNSTREAM: &str = "order-service";

/// Names of our crates start with this.
const PREFIX: &str = "diesel-outbox";

pub(crate) fn check(members: &Members) -> anyhow::Result<()> {
    let downstream = members
        .get(DOWNSTREAM)
        .with_context(|| format!("workspace has no package {DOWNSTREAM}"))?;
    let downstream_reqs = requirements(&read_toml(&downstream.manifest_path)?);
    let mut checked = 0;
    for page in pages(&members.root)? {
        let text = std::fs::read_to_string(&page)
            .with_context(|| format!("reading {}", page.display()))?;
        for (index, block) in toml_blocks(&text).into_iter().enumerate() {
            let where_ = format!("{} (TOML block {})", page.display(), index + 1);
            let manifest: toml::Table =
                toml::from_str(&block).with_context(|| format!("{where_} does not parse"))?;
            for (name, req) in requirements(&manifest) {
                let member = members
                    .get(&name)
                    .filter(|member| member.published())
                    .with_context(|| format!("{where_} names {name}, not a published package"))?;
                let req = req.with_context(|| format!("{where_}: {name} has no version"))?;
                ensure!(
                    accepts(&req, &member.version)?,
                    "{where_}: {name} = \"{req}\" does not accept the workspace's {}",
                    member.version
                );
                match downstream_reqs.get(&name) {
                    Some(Some(own)) if *own == req => {}
                    other => bail!(
                        "{where_}: {name} = \"{req}\", but {DOWNSTREAM} depends on it with {other:?}; \
                         give it the guide's path and version"
                    ),
                }
                checked += 1;
            }
        }
    }
    ensure!(checked > 0, "found no {PREFIX}-* dependency in the guide");
    eprintln!("ok: {checked} crate names and versions in the guide are the workspace's");
    Ok(())
}

/// README.md and every page under docs/.
fn pages(root: &Path) -> anyhow::Result<Vec<std::path::PathBuf>> {
    let mut pages = vec![root.join("README.md")];
    for entry in std::fs::read_dir(root.join("docs")).context("reading docs/")? {
        let path = entry?.path();
        if path.extension().is_some_and(|ext| ext == "md") {
            pages.push(path);
        }
    }
    pages.sort();
    Ok(pages)
}

fn read_toml(path: &Path) -> anyhow::Result<toml::Table> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    toml::from_str(&text).with_context(|| format!("{} does not parse", path.display()))
}

/// The text of every fenced ```toml block.
fn toml_blocks(markdown: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in markdown.lines() {
        match current.as_mut() {
            None if line.trim_start().starts_with("```toml") => current = Some(String::new()),
            Some(_) if line.trim_start().starts_with("```") => blocks.extend(current.take()),
            Some(block) => {
                block.push_str(line);
                block.push('\n');
            }
            None => {}
        }
    }
    blocks
}

/// `name -> version requirement` of our crates among all dependency tables.
fn requirements(manifest: &toml::Table) -> BTreeMap<String, Option<String>> {
    let mut found = BTreeMap::new();
    for table in ["dependencies", "dev-dependencies"] {
        let Some(deps) = manifest.get(table).and_then(toml::Value::as_table) else {
            continue;
        };
        for (name, spec) in deps.iter().filter(|(name, _)| name.starts_with(PREFIX)) {
            let req = match spec {
                toml::Value::String(req) => Some(req.clone()),
                toml::Value::Table(spec) => spec
                    .get("version")
                    .and_then(toml::Value::as_str)
                    .map(str::to_owned),
                _ => None,
            };
            found.insert(name.clone(), req);
        }
    }
    found
}

/// Whether a caret requirement (`"0.1"`, `"^1.2.3"`, `"1"`) accepts `version`.
fn accepts(req: &str, version: &str) -> anyhow::Result<bool> {
    let parse = |text: &str| -> anyhow::Result<Vec<u64>> {
        text.split('.')
            .map(|part| {
                part.parse::<u64>()
                    .with_context(|| format!("bad version {text:?}"))
            })
            .collect()
    };
    let wanted = parse(req.trim_start_matches('^'))?;
    let have = parse(version.split(['-', '+']).next().unwrap_or(version))?;
    ensure!(
        !wanted.is_empty() && wanted.len() <= 3 && have.len() == 3,
        "unsupported version {req:?} or {version:?}"
    );
    // The leftmost non-zero component given (or the last one given) must match;
    // components before it must match; the rest only need to be at least as high.
    let fixed = wanted
        .iter()
        .position(|&part| part != 0)
        .unwrap_or(wanted.len() - 1);
    let same_prefix = wanted[..=fixed] == have[..=fixed];
    Ok(same_prefix && have[..wanted.len()] >= wanted[..])
}

#[cfg(test)]
mod tests {
    use super::accepts;

    #[test]
    fn caret_requirements() -> anyhow::Result<()> {
        assert!(accepts("0.1", "0.1.0")?);
        assert!(accepts("0.1", "0.1.7")?);
        assert!(!accepts("0.1", "0.2.0")?);
        assert!(!accepts("0.2", "0.1.0")?);
        assert!(accepts("1", "1.4.0")?);
        assert!(!accepts("1.5", "1.4.0")?);
        assert!(accepts("^0.1.2", "0.1.3")?);
        assert!(!accepts("0.1.2", "0.1.1")?);
        assert!(!accepts("0.0.3", "0.0.4")?);
        Ok(())
    }
}

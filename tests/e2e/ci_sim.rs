//! A small stand-in for a CI runner, enough to run the workflows and the action in `ci/` for
//! real: GitHub Actions jobs (run steps, the composite action, `if:` conditions and
//! expressions, step outputs, artifacts) and GitLab CI jobs (variables, scripts, artifacts).
//!
//! Steps that fetch things (`actions/checkout`, toolchain and cache actions, `cargo
//! install`) are simulated: checkout copies a fixture crate into a fresh workspace, the
//! tool under test is "installed" already, so nothing needs the network. Every `run:` and
//! `script:` line runs in bash as the runners run it. An expression the simulation does
//! not know (a typo'd context, an unknown function) fails the test.

use crate::harness::{copy_tree, repo_root, scratch};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use yaml_rust2::{Yaml, YamlLoader};

/// Parses a YAML file that must hold exactly one document.
pub fn load_yaml(path: &Path) -> Yaml {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut docs = YamlLoader::load_from_str(&text)
        .unwrap_or_else(|e| panic!("{} is not valid YAML: {e}", path.display()));
    assert_eq!(docs.len(), 1, "{}: one document", path.display());
    docs.remove(0)
}

/// A scalar as the runner sees it (numbers and booleans as their text).
pub fn scalar(y: &Yaml) -> Option<String> {
    match y {
        Yaml::String(s) | Yaml::Real(s) => Some(s.clone()),
        Yaml::Integer(i) => Some(i.to_string()),
        Yaml::Boolean(b) => Some(b.to_string()),
        _ => None,
    }
}

/// The entries of a mapping, in order, with string keys.
pub fn entries(y: &Yaml) -> Vec<(String, &Yaml)> {
    y.as_hash()
        .map(|h| {
            h.iter()
                .map(|(k, v)| (scalar(k).expect("string keys"), v))
                .collect()
        })
        .unwrap_or_default()
}

// ---------------------------------------------------------------------------------------
// Expressions: `${{ … }}` and `if:` conditions.

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    Str(String),
    Op(&'static str),
}

fn tokenize(expr: &str) -> Vec<Tok> {
    let chars: Vec<char> = expr.chars().collect();
    let mut toks = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c == '\'' {
            let mut s = String::new();
            i += 1;
            loop {
                assert!(i < chars.len(), "unterminated string in `{expr}`");
                if chars[i] == '\'' {
                    if chars.get(i + 1) == Some(&'\'') {
                        s.push('\'');
                        i += 2;
                        continue;
                    }
                    i += 1;
                    break;
                }
                s.push(chars[i]);
                i += 1;
            }
            toks.push(Tok::Str(s));
        } else if let Some(op) = ["==", "!=", "&&", "||"]
            .into_iter()
            .find(|op| expr[expr.char_indices().nth(i).unwrap().0..].starts_with(op))
        {
            toks.push(Tok::Op(op));
            i += 2;
        } else if let Some(op) = ["!", "(", ")", ","]
            .into_iter()
            .find(|op| c == op.chars().next().unwrap())
        {
            toks.push(Tok::Op(op));
            i += 1;
        } else if c.is_alphanumeric() || "_-.*/".contains(c) {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || "_-.*/".contains(chars[i])) {
                i += 1;
            }
            toks.push(Tok::Ident(chars[start..i].iter().collect()));
        } else {
            panic!("unexpected `{c}` in expression `{expr}`");
        }
    }
    toks
}

#[derive(Debug, Clone)]
enum Val {
    Str(String),
    Bool(bool),
}

impl Val {
    fn truthy(&self) -> bool {
        match self {
            Val::Bool(b) => *b,
            Val::Str(s) => !s.is_empty(),
        }
    }
    fn text(&self) -> String {
        match self {
            Val::Bool(b) => b.to_string(),
            Val::Str(s) => s.clone(),
        }
    }
}

/// What an expression can see.
#[derive(Default, Clone)]
pub struct Scope {
    /// `inputs.x`, `matrix.x`, `github.x`, `runner.x`, `strategy.x`.
    pub vars: BTreeMap<String, String>,
    /// `steps.<id>.outputs.<name>`.
    pub steps: BTreeMap<String, BTreeMap<String, String>>,
    /// Whether every step so far succeeded (`success()`, `failure()`).
    pub ok: bool,
}

impl Scope {
    fn lookup(&self, name: &str) -> String {
        if let Some(rest) = name.strip_prefix("steps.") {
            let (id, rest) = rest.split_once('.').unwrap_or_else(|| panic!("`{name}`"));
            let key = rest
                .strip_prefix("outputs.")
                .unwrap_or_else(|| panic!("only step outputs are simulated: `{name}`"));
            // An output a step did not set is empty; an unknown step is a mistake.
            let outputs = self
                .steps
                .get(id)
                .unwrap_or_else(|| panic!("`{name}`: no earlier step has id `{id}`"));
            return outputs.get(key).cloned().unwrap_or_default();
        }
        self.vars
            .get(name)
            .cloned()
            .unwrap_or_else(|| panic!("the simulation does not know `{name}`"))
    }

    fn eval(&self, expr: &str) -> Val {
        let toks = tokenize(expr);
        let mut pos = 0;
        let v = self.or(&toks, &mut pos, expr);
        assert_eq!(pos, toks.len(), "trailing tokens in `{expr}`");
        v
    }

    fn or(&self, t: &[Tok], pos: &mut usize, e: &str) -> Val {
        let mut v = self.and(t, pos, e);
        while t.get(*pos) == Some(&Tok::Op("||")) {
            *pos += 1;
            let r = self.and(t, pos, e);
            v = if v.truthy() { v } else { r };
        }
        v
    }

    fn and(&self, t: &[Tok], pos: &mut usize, e: &str) -> Val {
        let mut v = self.unary(t, pos, e);
        while t.get(*pos) == Some(&Tok::Op("&&")) {
            *pos += 1;
            let r = self.unary(t, pos, e);
            v = if v.truthy() { r } else { v };
        }
        v
    }

    fn unary(&self, t: &[Tok], pos: &mut usize, e: &str) -> Val {
        if t.get(*pos) == Some(&Tok::Op("!")) {
            *pos += 1;
            return Val::Bool(!self.unary(t, pos, e).truthy());
        }
        let left = self.primary(t, pos, e);
        match t.get(*pos) {
            Some(Tok::Op(op @ ("==" | "!="))) => {
                let op = *op;
                *pos += 1;
                let right = self.primary(t, pos, e);
                let (l, r) = (left.text().to_lowercase(), right.text().to_lowercase());
                let same = match (l.parse::<f64>(), r.parse::<f64>()) {
                    (Ok(a), Ok(b)) => a == b,
                    _ => l == r,
                };
                Val::Bool(if op == "==" { same } else { !same })
            }
            _ => left,
        }
    }

    fn primary(&self, t: &[Tok], pos: &mut usize, e: &str) -> Val {
        let tok = t
            .get(*pos)
            .unwrap_or_else(|| panic!("`{e}` ends early"))
            .clone();
        *pos += 1;
        match tok {
            Tok::Op("(") => {
                let v = self.or(t, pos, e);
                assert_eq!(t.get(*pos), Some(&Tok::Op(")")), "`{e}`");
                *pos += 1;
                v
            }
            Tok::Str(s) => Val::Str(s),
            Tok::Ident(name) if t.get(*pos) == Some(&Tok::Op("(")) => {
                *pos += 1;
                let mut args = Vec::new();
                while t.get(*pos) != Some(&Tok::Op(")")) {
                    args.push(self.or(t, pos, e));
                    if t.get(*pos) == Some(&Tok::Op(",")) {
                        *pos += 1;
                    }
                }
                *pos += 1;
                match name.as_str() {
                    "always" => Val::Bool(true),
                    "success" => Val::Bool(self.ok),
                    "failure" => Val::Bool(!self.ok),
                    "cancelled" => Val::Bool(false),
                    "hashFiles" => {
                        assert!(!args.is_empty(), "hashFiles needs a pattern: `{e}`");
                        Val::Str("0123abcd".into())
                    }
                    other => panic!("unknown function `{other}` in `{e}`"),
                }
            }
            Tok::Ident(name) if name.parse::<f64>().is_ok() => Val::Str(name),
            Tok::Ident(name) if name == "true" || name == "false" => Val::Bool(name == "true"),
            Tok::Ident(name) => Val::Str(self.lookup(&name)),
            other => panic!("unexpected {other:?} in `{e}`"),
        }
    }

    /// Replaces every `${{ … }}` in `text`.
    pub fn interpolate(&self, text: &str) -> String {
        let mut out = String::new();
        let mut rest = text;
        while let Some(start) = rest.find("${{") {
            out.push_str(&rest[..start]);
            let end = rest[start..]
                .find("}}")
                .unwrap_or_else(|| panic!("unterminated expression in `{text}`"));
            out.push_str(&self.eval(&rest[start + 3..start + end]).text());
            rest = &rest[start + end + 2..];
        }
        out.push_str(rest);
        out
    }

    /// An `if:` condition: `success() && …` unless it asks for a status itself.
    pub fn condition(&self, cond: Option<&str>) -> bool {
        let Some(cond) = cond else { return self.ok };
        let cond = cond.trim();
        let cond = cond
            .strip_prefix("${{")
            .and_then(|c| c.strip_suffix("}}"))
            .unwrap_or(cond);
        let asks_status = ["always(", "success(", "failure(", "cancelled("]
            .iter()
            .any(|f| cond.contains(f));
        let v = self.eval(cond).truthy();
        if asks_status {
            v
        } else {
            self.ok && v
        }
    }
}

// ---------------------------------------------------------------------------------------
// The runner.

/// One simulated CI run: a directory for its jobs' workspaces and its artifacts.
pub struct Sim {
    pub dir: PathBuf,
    pub artifacts: PathBuf,
    bin: PathBuf,
    /// Each simulated `cargo install` call, a line each.
    pub install_log: PathBuf,
    /// The workflow run the jobs belong to (`GITHUB_RUN_ID`): one more on each `next_run`.
    run_id: std::cell::Cell<u32>,
}

/// What a simulated job did.
#[derive(Debug, Default)]
pub struct Job {
    pub workspace: PathBuf,
    pub ok: bool,
    /// Everything the steps printed, with a header per step.
    pub log: String,
    /// Workflow commands (`::error …`, `::notice …`) the steps printed to stdout.
    pub commands: Vec<String>,
    /// The job summary (`$GITHUB_STEP_SUMMARY`).
    pub summary: String,
    /// Artifacts uploaded, by name.
    pub uploaded: Vec<String>,
    /// The outputs of each use of the cargo-leakcheck action, in order.
    pub action_outputs: Vec<BTreeMap<String, String>>,
    /// The `@ref` of each use of the cargo-leakcheck action.
    pub action_refs: Vec<String>,
    /// Names of steps that ran (after their `if:`).
    pub ran: Vec<String>,
    /// The script's exit code (GitLab).
    pub exit_code: Option<i32>,
}

impl Sim {
    /// A fresh simulation directory.
    pub fn new(name: &str) -> Sim {
        let dir = scratch().join("ci-sim").join(name);
        let _ = std::fs::remove_dir_all(&dir);
        let bin = dir.join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let artifacts = dir.join("artifacts");
        std::fs::create_dir_all(&artifacts).unwrap();
        // `cargo` on PATH: runs this build of cargo-leakcheck for `cargo leakcheck` (whatever
        // is in ~/.cargo/bin), logs `cargo install`, and hands the rest to the real cargo.
        let cargo = bin.join("cargo");
        std::fs::write(
            &cargo,
            "#!/bin/sh\ncase \"$1\" in\n  leakcheck) exec \"$SIM_LEAKCHECK\" \"$@\" ;;\n  install) echo \"cargo $*\" >> \"$SIM_INSTALL_LOG\"; exit 0 ;;\nesac\nexec \"$SIM_REAL_CARGO\" \"$@\"\n",
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&cargo, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::os::unix::fs::symlink(
            env!("CARGO_BIN_EXE_cargo-leakcheck"),
            bin.join("cargo-leakcheck"),
        )
        .unwrap();
        Sim {
            install_log: dir.join("cargo-install.log"),
            run_id: std::cell::Cell::new(1),
            dir,
            artifacts,
            bin,
        }
    }

    /// A fresh directory for a job's own files, and its workspace: empty, and at the same
    /// path for every job of the run, as runners check out to one path (so the absolute
    /// paths in one job's report name files in the next job's checkout too).
    fn job_dir(&self, job: &str) -> (PathBuf, PathBuf) {
        let mut n = 0;
        let dir = loop {
            let d = self.dir.join(format!("job-{job}-{n}"));
            if !d.exists() {
                break d;
            }
            n += 1;
        };
        std::fs::create_dir_all(&dir).unwrap();
        let workspace = self.dir.join("work").join("repo");
        let _ = std::fs::remove_dir_all(&workspace);
        std::fs::create_dir_all(&workspace).unwrap();
        (dir, workspace)
    }

    /// The environment every runner gives its steps, on a machine where cargo-leakcheck has
    /// never run (an empty runtime cache).
    fn base_env(&self, job_dir: &Path) -> BTreeMap<String, String> {
        let mut env: BTreeMap<String, String> = std::env::vars()
            .filter(|(k, _)| {
                !(k.starts_with("GITHUB_")
                    || k.starts_with("RUNNER_")
                    || k.starts_with("CI_")
                    || k.starts_with("LEAKCHECK_")
                    || matches!(
                        k.as_str(),
                        "CI" | "GITLAB_CI" | "CARGO" | "CARGO_TARGET_DIR" | "RUSTFLAGS"
                    ))
            })
            .collect();
        let path = std::env::var("PATH").unwrap_or_default();
        env.insert("PATH".into(), format!("{}:{path}", self.bin.display()));
        env.insert(
            "SIM_LEAKCHECK".into(),
            env!("CARGO_BIN_EXE_cargo-leakcheck").into(),
        );
        env.insert("SIM_REAL_CARGO".into(), real_cargo().display().to_string());
        env.insert(
            "SIM_INSTALL_LOG".into(),
            self.install_log.display().to_string(),
        );
        env.insert(
            "LEAKCHECK_CACHE_DIR".into(),
            job_dir.join("runtime-cache").display().to_string(),
        );
        env.insert("CI".into(), "true".into());
        env
    }

    /// Runs one job of a GitHub Actions workflow, with the fixture as the repository.
    pub fn github_job(
        &self,
        workflow: &Path,
        job_id: &str,
        matrix: &[(&str, &str)],
        fixture: &str,
    ) -> Job {
        self.github_job_on("pull_request", workflow, job_id, matrix, fixture)
    }

    /// Starts another workflow run of the same repository: its artifacts are its own, the
    /// Actions cache is shared.
    pub fn next_run(&self) {
        self.run_id.set(self.run_id.get() + 1);
        let _ = std::fs::remove_dir_all(&self.artifacts);
        std::fs::create_dir_all(&self.artifacts).unwrap();
    }

    /// A job run for an event: `pull_request`, or `push` (to main).
    pub fn github_job_on(
        &self,
        event: &str,
        workflow: &Path,
        job_id: &str,
        matrix: &[(&str, &str)],
        fixture: &str,
    ) -> Job {
        let doc = load_yaml(workflow);
        let job_def = &doc["jobs"][job_id];
        assert!(!job_def.is_badvalue(), "no job `{job_id}`");
        let (dir, workspace) = self.job_dir(job_id);
        let summary = dir.join("step-summary.md");
        let runner_temp = dir.join("runner-temp");
        std::fs::create_dir_all(&runner_temp).unwrap();
        let mut env = self.base_env(&dir);
        for (k, v) in [
            ("GITHUB_ACTIONS", "true"),
            ("GITHUB_JOB", job_id),
            ("GITHUB_RUN_ATTEMPT", "1"),
            ("RUNNER_OS", "Linux"),
            ("RUNNER_ARCH", "X64"),
        ] {
            env.insert(k.into(), v.into());
        }
        env.insert("GITHUB_WORKSPACE".into(), workspace.display().to_string());
        env.insert("GITHUB_STEP_SUMMARY".into(), summary.display().to_string());
        env.insert("RUNNER_TEMP".into(), runner_temp.display().to_string());
        env.insert("GITHUB_RUN_ID".into(), self.run_id.get().to_string());

        let mut scope = Scope {
            ok: true,
            ..Scope::default()
        };
        let declared: Vec<String> = entries(&job_def["strategy"]["matrix"])
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        for (k, v) in matrix {
            assert!(
                declared.iter().any(|d| d == k),
                "the job has no matrix `{k}`"
            );
            scope.vars.insert(format!("matrix.{k}"), v.to_string());
        }
        let git_ref = match event {
            "push" => "refs/heads/main",
            "pull_request" => "refs/pull/1/merge",
            other => panic!("the simulation does not know the event `{other}`"),
        };
        // A commit of its own per job, as every push and pull request update has.
        let sha = {
            use std::hash::{Hash, Hasher};
            let mut h = std::collections::hash_map::DefaultHasher::new();
            dir.hash(&mut h);
            format!("{:016x}{:024x}", h.finish(), 0)
        };
        for (k, v) in [
            ("github.job", job_id.to_string()),
            ("github.event_name", event.to_string()),
            ("github.ref", git_ref.to_string()),
            ("github.sha", sha),
            ("github.workspace", workspace.display().to_string()),
            ("runner.os", "Linux".into()),
            ("runner.temp", runner_temp.display().to_string()),
        ] {
            scope.vars.insert(k.into(), v);
        }
        let mut job = Job {
            workspace: workspace.clone(),
            ..Job::default()
        };
        let ctx = StepCtx {
            sim: self,
            job_dir: &dir,
            fixture,
            workspace: &workspace,
            env: &env,
            action_path: None,
        };
        let steps = job_def["steps"].as_vec().expect("steps");
        ctx.run_steps(steps, &mut scope, &mut job);
        job.ok = scope.ok;
        job.summary = std::fs::read_to_string(&summary).unwrap_or_default();
        job
    }

    /// Runs one GitLab CI job: its variables, `before_script` and `script` in one shell with
    /// errexit as GitLab's shell executor does, then its artifacts per `artifacts:when`.
    pub fn gitlab_job(&self, file: &Path, job_name: &str, fixture: &str) -> Job {
        let doc = load_yaml(file);
        let def = &doc[job_name];
        assert!(!def.is_badvalue(), "no job `{job_name}`");
        let (dir, workspace) = self.job_dir(job_name);
        copy_tree(&repo_root().join(fixture), &workspace);
        let mut env = self.base_env(&dir);
        env.insert("GITLAB_CI".into(), "true".into());
        env.insert("CI_PROJECT_DIR".into(), workspace.display().to_string());
        env.insert("CI_JOB_NAME".into(), job_name.into());
        let mut script = String::from("set -eo pipefail\n");
        for (k, v) in entries(&def["variables"]) {
            let v = scalar(v).expect("a variable's value");
            script.push_str(&format!("export {k}=\"{v}\"\n"));
        }
        for section in ["before_script", "script"] {
            for line in def[section].as_vec().into_iter().flatten() {
                script.push_str(&scalar(line).expect("a script line"));
                script.push('\n');
            }
        }
        let (code, out) = run_bash(&script, &workspace, &env, &dir.join("script.sh"));
        let mut job = Job {
            workspace: workspace.clone(),
            ok: code == 0,
            log: out,
            exit_code: Some(code),
            ..Job::default()
        };
        let when = def["artifacts"]["when"].as_str().unwrap_or("on_success");
        let keep = match when {
            "always" => true,
            "on_failure" => !job.ok,
            "on_success" => job.ok,
            other => panic!("artifacts:when `{other}`"),
        };
        if keep {
            let dest = self.artifacts.join(job_name);
            for path in def["artifacts"]["paths"].as_vec().into_iter().flatten() {
                let path = path.as_str().unwrap();
                let from = workspace.join(path);
                assert!(
                    from.exists(),
                    "artifact path `{path}` missing:\n{}",
                    job.log
                );
                copy_any(&from, &dest.join(path));
            }
            job.uploaded.push(job_name.into());
        }
        job
    }
}

/// Copies a file or a directory tree.
/// The real cargo, by its path: cargo's own `CARGO` under `cargo test`, else the first
/// `cargo` on the PATH the tests started with. Never the name alone: the simulated `cargo`
/// first on a job's PATH would hand the call to itself, for good.
pub fn real_cargo() -> PathBuf {
    if let Some(cargo) = std::env::var_os("CARGO") {
        return PathBuf::from(cargo);
    }
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join("cargo"))
        .find(|c| c.is_file())
        .expect("cargo on the PATH")
}

fn copy_any(from: &Path, to: &Path) {
    if from.is_dir() {
        copy_tree(from, to);
    } else {
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(from, to).unwrap();
    }
}

/// Runs a script as a runner's bash would; returns its exit code and output.
fn run_bash(
    script: &str,
    cwd: &Path,
    env: &BTreeMap<String, String>,
    file: &Path,
) -> (i32, String) {
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(file, script).unwrap();
    std::fs::create_dir_all(cwd).unwrap();
    let out = Command::new("bash")
        .args(["--noprofile", "--norc", "-eo", "pipefail"])
        .arg(file)
        .current_dir(cwd)
        .env_clear()
        .envs(env)
        .output()
        .unwrap();
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap_or(-1), text)
}

struct StepCtx<'a> {
    sim: &'a Sim,
    job_dir: &'a Path,
    fixture: &'a str,
    workspace: &'a Path,
    env: &'a BTreeMap<String, String>,
    /// Inside the composite action: its directory.
    action_path: Option<&'a Path>,
}

impl StepCtx<'_> {
    fn run_steps(&self, steps: &[Yaml], scope: &mut Scope, job: &mut Job) {
        for (i, step) in steps.iter().enumerate() {
            let name = step["name"]
                .as_str()
                .map(String::from)
                .or_else(|| step["uses"].as_str().map(String::from))
                .unwrap_or_else(|| format!("step {i}"));
            let has_run = !step["run"].is_badvalue();
            let has_uses = !step["uses"].is_badvalue();
            assert!(has_run != has_uses, "`{name}`: exactly one of run and uses");
            if !scope.condition(step["if"].as_str()) {
                job.log.push_str(&format!("--- skipped: {name}\n"));
                // A skipped step's outputs read as empty.
                if let Some(id) = step["id"].as_str() {
                    scope.steps.insert(id.to_string(), BTreeMap::new());
                }
                continue;
            }
            job.ran.push(name.clone());
            job.log.push_str(&format!("--- {name}\n"));
            let id = step["id"].as_str().map(String::from);
            let outputs = if has_run {
                self.run_step(step, &name, scope, job)
            } else {
                self.uses_step(step, &name, scope, job)
            };
            match outputs {
                Some(outputs) => {
                    if let Some(id) = id {
                        scope.steps.insert(id, outputs);
                    }
                }
                None => {
                    scope.ok = false;
                    if let Some(id) = id {
                        scope.steps.insert(id, BTreeMap::new());
                    }
                }
            }
        }
    }

    /// A `run:` step; its outputs, or `None` when it failed.
    fn run_step(
        &self,
        step: &Yaml,
        name: &str,
        scope: &Scope,
        job: &mut Job,
    ) -> Option<BTreeMap<String, String>> {
        if self.action_path.is_some() {
            assert_eq!(
                step["shell"].as_str(),
                Some("bash"),
                "`{name}`: composite steps need a shell"
            );
        }
        let script = scope.interpolate(step["run"].as_str().expect("run is text"));
        let mut env = self.env.clone();
        for (k, v) in entries(&step["env"]) {
            env.insert(k, scope.interpolate(&scalar(v).unwrap_or_default()));
        }
        let dir = self.job_dir.join("steps");
        std::fs::create_dir_all(&dir).unwrap();
        let n = std::fs::read_dir(&dir).unwrap().count();
        let output_file = dir.join(format!("output-{n}"));
        std::fs::write(&output_file, "").unwrap();
        env.insert("GITHUB_OUTPUT".into(), output_file.display().to_string());
        if let Some(path) = self.action_path {
            env.insert("GITHUB_ACTION_PATH".into(), path.display().to_string());
        }
        let cwd = match step["working-directory"].as_str() {
            Some(wd) => self.workspace.join(scope.interpolate(wd)),
            None => self.workspace.to_path_buf(),
        };
        let (code, out) = run_bash(&script, &cwd, &env, &dir.join(format!("script-{n}.sh")));
        for line in out.lines() {
            if line.starts_with("::") {
                job.commands.push(line.to_string());
            }
        }
        job.log.push_str(&out);
        job.log.push_str(&format!("(exit {code})\n"));
        let mut outputs = BTreeMap::new();
        for line in std::fs::read_to_string(&output_file).unwrap().lines() {
            let (k, v) = line
                .split_once('=')
                .unwrap_or_else(|| panic!("`{name}` wrote `{line}` to GITHUB_OUTPUT"));
            outputs.insert(k.to_string(), v.to_string());
        }
        (code == 0).then_some(outputs)
    }

    /// A `uses:` step; its outputs, or `None` when it failed.
    fn uses_step(
        &self,
        step: &Yaml,
        name: &str,
        scope: &Scope,
        job: &mut Job,
    ) -> Option<BTreeMap<String, String>> {
        let uses = step["uses"].as_str().unwrap();
        let with: BTreeMap<String, String> = entries(&step["with"])
            .into_iter()
            .map(|(k, v)| (k, scope.interpolate(&scalar(v).expect("a with value"))))
            .collect();
        let (action, reference) = uses
            .split_once('@')
            .unwrap_or_else(|| panic!("`{uses}` pins no ref"));
        match action {
            "actions/checkout" => {
                copy_tree(&repo_root().join(self.fixture), self.workspace);
                Some(BTreeMap::new())
            }
            "dtolnay/rust-toolchain" | "actions/cache" => Some(BTreeMap::new()),
            // Caches kept across the simulated run's jobs, as GitHub keeps them across
            // workflow runs (a pull request sees its base branch's).
            "actions/cache/save" => {
                let key = &with["key"];
                let entry = self.sim.dir.join("cache").join(key);
                assert!(
                    !entry.exists(),
                    "cache `{key}` saved twice (GitHub keeps the first)"
                );
                copy_any(&self.workspace.join(&with["path"]), &entry);
                let mut index =
                    std::fs::read_to_string(self.sim.dir.join("cache-index")).unwrap_or_default();
                index.push_str(key);
                index.push('\n');
                std::fs::write(self.sim.dir.join("cache-index"), index).unwrap();
                Some(BTreeMap::new())
            }
            "actions/cache/restore" => {
                let index =
                    std::fs::read_to_string(self.sim.dir.join("cache-index")).unwrap_or_default();
                let saved: Vec<&str> = index.lines().collect();
                let key = &with["key"];
                let prefixes: Vec<String> = with
                    .get("restore-keys")
                    .map(|r| {
                        r.lines()
                            .map(str::trim)
                            .filter(|l| !l.is_empty())
                            .map(String::from)
                            .collect()
                    })
                    .unwrap_or_default();
                // The exact key, else the newest entry a restore key starts.
                let found = saved.iter().rev().find(|k| *k == key).or_else(|| {
                    prefixes
                        .iter()
                        .find_map(|p| saved.iter().rev().find(|k| k.starts_with(p.as_str())))
                });
                let mut outputs = BTreeMap::new();
                outputs.insert(
                    "cache-hit".to_string(),
                    (found == Some(&key.as_str())).to_string(),
                );
                if let Some(k) = found {
                    copy_any(
                        &self.sim.dir.join("cache").join(k),
                        &self.workspace.join(&with["path"]),
                    );
                    outputs.insert("cache-matched-key".to_string(), k.to_string());
                    job.log.push_str(&format!("cache restored from key: {k}\n"));
                } else {
                    job.log.push_str("cache not found\n");
                }
                Some(outputs)
            }
            "actions/upload-artifact" => {
                let name = &with["name"];
                let path = self.workspace.join(&with["path"]);
                let dest = self.sim.artifacts.join(name);
                assert!(
                    !dest.exists(),
                    "artifact `{name}` uploaded twice in one run (GitHub refuses the second)"
                );
                if !path.exists() {
                    assert_eq!(
                        with.get("if-no-files-found").map(String::as_str),
                        Some("warn"),
                        "`{}` missing",
                        path.display()
                    );
                    job.log.push_str("no files to upload\n");
                    return Some(BTreeMap::new());
                }
                copy_any(&path, &dest);
                job.uploaded.push(name.clone());
                Some(BTreeMap::new())
            }
            "actions/download-artifact" => {
                let into = self
                    .workspace
                    .join(with.get("path").map_or(".", String::as_str));
                let pattern = with.get("pattern").expect("download by pattern");
                let prefix = pattern.strip_suffix('*').expect("a prefix* pattern");
                for entry in std::fs::read_dir(&self.sim.artifacts).unwrap() {
                    let entry = entry.unwrap();
                    let artifact = entry.file_name().to_string_lossy().into_owned();
                    if artifact.starts_with(prefix) {
                        copy_tree(&entry.path(), &into.join(&artifact));
                    }
                }
                Some(BTreeMap::new())
            }
            a if a.ends_with("/cargo-leakcheck/ci") => {
                job.action_refs.push(reference.to_string());
                self.composite(with, name, scope, job)
            }
            other => panic!("the simulation does not know the action `{other}`"),
        }
    }

    /// The cargo-leakcheck action (`ci/action.yml`), run step by step.
    fn composite(
        &self,
        with: BTreeMap<String, String>,
        name: &str,
        caller: &Scope,
        job: &mut Job,
    ) -> Option<BTreeMap<String, String>> {
        let action_dir = repo_root().join("ci");
        let action = load_yaml(&action_dir.join("action.yml"));
        assert_eq!(action["runs"]["using"].as_str(), Some("composite"));
        let mut scope = Scope {
            ok: true,
            vars: caller
                .vars
                .iter()
                .filter(|(k, _)| !k.starts_with("inputs.") && !k.starts_with("matrix."))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            steps: BTreeMap::new(),
        };
        let declared = entries(&action["inputs"]);
        for k in with.keys() {
            assert!(
                declared.iter().any(|(d, _)| d == k),
                "`{name}`: the action has no input `{k}`"
            );
        }
        for (k, def) in declared {
            let value = with
                .get(&k)
                .cloned()
                .unwrap_or_else(|| scalar(&def["default"]).unwrap_or_default());
            scope.vars.insert(format!("inputs.{k}"), value);
        }
        scope.vars.insert(
            "github.action_path".into(),
            action_dir.display().to_string(),
        );
        let ctx = StepCtx {
            action_path: Some(&action_dir),
            ..*self
        };
        ctx.run_steps(action["runs"]["steps"].as_vec().unwrap(), &mut scope, job);
        let outputs: BTreeMap<String, String> = entries(&action["outputs"])
            .into_iter()
            .map(|(k, def)| (k, scope.interpolate(def["value"].as_str().unwrap())))
            .collect();
        job.action_outputs.push(outputs.clone());
        scope.ok.then_some(outputs)
    }
}

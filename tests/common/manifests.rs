//! Pod manifests for the end-to-end tests: containers and pods built in
//! code and written as the YAML a static pod directory holds.

use super::{BUSYBOX, NODE};

/// A container of a pod manifest.
#[derive(Clone)]
pub struct Ctn {
    pub name: String,
    pub image: String,
    pub pull_policy: String,
    pub script: String,
    pub mounts: Vec<(String, String)>,
}

pub fn ctn(name: &str, script: &str) -> Ctn {
    Ctn {
        name: name.into(),
        image: BUSYBOX.into(),
        pull_policy: "IfNotPresent".into(),
        script: script.into(),
        mounts: Vec::new(),
    }
}

impl Ctn {
    pub fn mount(mut self, volume: &str, path: &str) -> Self {
        self.mounts.push((volume.into(), path.into()));
        self
    }
    pub fn image(mut self, image: &str, pull_policy: &str) -> Self {
        self.image = image.into();
        self.pull_policy = pull_policy.into();
        self
    }
}

/// A pod manifest, rendered as YAML by `yaml()`.
#[derive(Clone)]
pub struct PodManifest {
    pub name: String,
    pub restart_policy: Option<String>,
    pub init: Vec<Ctn>,
    pub containers: Vec<Ctn>,
    pub empty_dirs: Vec<String>,
    pub grace_seconds: Option<u32>,
}

pub fn pod(name: &str, containers: Vec<Ctn>) -> PodManifest {
    PodManifest {
        name: name.into(),
        restart_policy: None,
        init: Vec::new(),
        containers,
        empty_dirs: Vec::new(),
        grace_seconds: Some(5),
    }
}

/// YAML double-quoted scalars accept JSON string syntax.
fn q(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

fn ctn_yaml(out: &mut String, c: &Ctn) {
    out.push_str(&format!("  - name: {}\n", q(&c.name)));
    out.push_str(&format!("    image: {}\n", q(&c.image)));
    out.push_str(&format!("    imagePullPolicy: {}\n", c.pull_policy));
    out.push_str(&format!(
        "    command: [\"sh\", \"-c\", {}]\n",
        q(&c.script)
    ));
    if !c.mounts.is_empty() {
        out.push_str("    volumeMounts:\n");
        for (v, p) in &c.mounts {
            out.push_str(&format!(
                "    - name: {}\n      mountPath: {}\n",
                q(v),
                q(p)
            ));
        }
    }
}

impl PodManifest {
    pub fn restart_policy(mut self, p: &str) -> Self {
        self.restart_policy = Some(p.into());
        self
    }
    pub fn init(mut self, c: Vec<Ctn>) -> Self {
        self.init = c;
        self
    }
    pub fn empty_dir(mut self, name: &str) -> Self {
        self.empty_dirs.push(name.into());
        self
    }

    pub fn full_name(&self) -> String {
        format!("{}-{NODE}", self.name)
    }

    pub fn yaml(&self) -> String {
        let mut y = String::new();
        y.push_str("apiVersion: v1\nkind: Pod\nmetadata:\n");
        y.push_str(&format!(
            "  name: {}\n  namespace: default\n  labels:\n    app: {}\n",
            q(&self.name),
            q(&self.name)
        ));
        y.push_str("spec:\n");
        if let Some(p) = &self.restart_policy {
            y.push_str(&format!("  restartPolicy: {p}\n"));
        }
        if let Some(g) = self.grace_seconds {
            y.push_str(&format!("  terminationGracePeriodSeconds: {g}\n"));
        }
        if !self.init.is_empty() {
            y.push_str("  initContainers:\n");
            for c in &self.init {
                ctn_yaml(&mut y, c);
            }
        }
        y.push_str("  containers:\n");
        for c in &self.containers {
            ctn_yaml(&mut y, c);
        }
        if !self.empty_dirs.is_empty() {
            y.push_str("  volumes:\n");
            for v in &self.empty_dirs {
                y.push_str(&format!("  - name: {}\n    emptyDir: {{}}\n", q(v)));
            }
        }
        y
    }
}

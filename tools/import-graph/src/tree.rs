//! The module tree of one crate target: every module reachable from its root file through `mod`
//! declarations (file modules, inline `mod x { }` blocks, `#[path = ...]`), with the names each
//! module binds (items, child modules, `use` imports) so paths can be resolved later.
//!
//! `cfg` attributes are ignored: every declared module is loaded (test modules included), so the
//! graph is the union over all configurations. A declared file that does not exist is skipped
//! and reported as a warning (a `cfg`-gated platform module may legitimately be absent).

use std::path::{Path, PathBuf};

/// Index of a module in [`ModuleTree::modules`].
pub type ModId = usize;

/// Failure to load a crate's module tree.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// A source file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A source file is not valid Rust.
    #[error("cannot parse {path}:{line}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// Line of the syntax error.
        line: usize,
        /// The parser's message.
        message: String,
    },
}

/// What a name bound in a module refers to.
#[derive(Debug, Clone)]
pub enum Binding {
    /// A child module (`mod x;` or `mod x { }`).
    Module(ModId),
    /// An item defined in this module (fn, struct, enum, trait, type, const, static, macro).
    Item,
    /// A `use` import: the path it names, relative to the module holding the `use`.
    Use(Vec<String>),
}

/// One import leaf of a `use` tree.
#[derive(Debug, Clone)]
pub struct UseLeaf {
    /// The imported path (for a glob, the path before `::*`).
    pub path: Vec<String>,
    /// The name it binds (`None` for a glob, `_` imports bind nothing either).
    pub name: Option<String>,
    /// Whether this is `path::*`.
    pub glob: bool,
    /// Line of the leaf's last segment in its file.
    pub line: usize,
}

/// A module of the tree.
pub struct Module {
    /// Module path from the crate root (empty for the root).
    pub path: Vec<String>,
    /// The enclosing module (`None` for the root).
    pub parent: Option<ModId>,
    /// The file holding this module's items.
    pub file: PathBuf,
    /// The module owning `file` (itself unless this is an inline module).
    pub file_module: ModId,
    /// Names bound in this module, in declaration order.
    pub bindings: Vec<(String, Binding)>,
    /// Glob imports (`use x::*`), paths relative to this module.
    pub globs: Vec<Vec<String>>,
    /// The module's own items (nested `mod` items excluded: they are modules of their own).
    pub items: Vec<syn::Item>,
}

/// The module tree of one crate target.
pub struct ModuleTree {
    /// All modules; index 0 is the crate root.
    pub modules: Vec<Module>,
    /// Files declared by a `mod` but absent.
    pub warnings: Vec<String>,
}

/// Where the files of a module's `mod x;` children live.
#[derive(Debug, Clone)]
struct Dirs {
    /// Directory of `x.rs` / `x/mod.rs` for a plain `mod x;`.
    children: PathBuf,
    /// Directory a `#[path = "..."]` attribute is relative to.
    path_attr: PathBuf,
}

impl ModuleTree {
    /// Loads the tree rooted at `root_file` (a `lib.rs`, `main.rs` or `src/bin/*.rs`).
    pub fn load(root_file: &Path) -> Result<Self, LoadError> {
        let mut tree = ModuleTree {
            modules: Vec::new(),
            warnings: Vec::new(),
        };
        let dir = root_file.parent().unwrap_or(Path::new(".")).to_path_buf();
        let file = parse(root_file)?;
        tree.modules.push(Module {
            path: Vec::new(),
            parent: None,
            file: root_file.to_path_buf(),
            file_module: 0,
            bindings: Vec::new(),
            globs: Vec::new(),
            items: Vec::new(),
        });
        tree.add_items(
            0,
            file.items,
            &Dirs {
                children: dir.clone(),
                path_attr: dir,
            },
        )?;
        Ok(tree)
    }

    /// The file module owning module `id`'s items.
    pub fn file_of(&self, id: ModId) -> ModId {
        self.modules[id].file_module
    }

    fn add_items(
        &mut self,
        id: ModId,
        items: Vec<syn::Item>,
        dirs: &Dirs,
    ) -> Result<(), LoadError> {
        for item in items {
            match item {
                syn::Item::Mod(module) => self.add_module(id, module, dirs)?,
                other => {
                    self.bind_item(id, &other);
                    self.modules[id].items.push(other);
                }
            }
        }
        Ok(())
    }

    fn add_module(
        &mut self,
        parent: ModId,
        module: syn::ItemMod,
        dirs: &Dirs,
    ) -> Result<(), LoadError> {
        let name = module.ident.to_string();
        let mut path = self.modules[parent].path.clone();
        path.push(name.clone());
        let new_id = self.modules.len();
        let path_attr = path_attribute(&module.attrs);
        let (file, file_module, items, child_dirs) = match module.content {
            Some((_, items)) => {
                // Inline module: same file; its children (and `#[path]`s) one directory deeper.
                let sub = match &path_attr {
                    Some(custom) => dirs.path_attr.join(custom),
                    None => dirs.children.join(&name),
                };
                let file = self.modules[parent].file.clone();
                let owner = self.modules[parent].file_module;
                let child_dirs = Dirs {
                    children: sub.clone(),
                    path_attr: sub,
                };
                (file, owner, items, child_dirs)
            }
            None => {
                let candidates = match &path_attr {
                    Some(custom) => vec![dirs.path_attr.join(custom)],
                    None => vec![
                        dirs.children.join(format!("{name}.rs")),
                        dirs.children.join(&name).join("mod.rs"),
                    ],
                };
                let Some(found) = candidates.iter().find(|candidate| candidate.is_file()) else {
                    self.warnings.push(format!(
                        "{}: `mod {name};` has no file (looked for {})",
                        self.modules[parent].file.display(),
                        candidates
                            .iter()
                            .map(|c| c.display().to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ));
                    return Ok(());
                };
                let parsed = parse(found)?;
                let file_dir = found.parent().unwrap_or(Path::new(".")).to_path_buf();
                // A `mod.rs` or a `#[path]` file holds its children beside it; `x.rs` in `x/`.
                let mod_rs =
                    path_attr.is_some() || found.file_name().is_some_and(|f| f == "mod.rs");
                let children = if mod_rs {
                    file_dir.clone()
                } else {
                    file_dir.join(&name)
                };
                let child_dirs = Dirs {
                    children,
                    path_attr: file_dir,
                };
                (found.clone(), new_id, parsed.items, child_dirs)
            }
        };
        self.modules.push(Module {
            path,
            parent: Some(parent),
            file,
            file_module,
            bindings: Vec::new(),
            globs: Vec::new(),
            items: Vec::new(),
        });
        self.modules[parent]
            .bindings
            .push((name, Binding::Module(new_id)));
        self.add_items(new_id, items, &child_dirs)
    }

    fn bind_item(&mut self, id: ModId, item: &syn::Item) {
        let ident = match item {
            syn::Item::Const(i) => Some(&i.ident),
            syn::Item::Enum(i) => Some(&i.ident),
            syn::Item::Fn(i) => Some(&i.sig.ident),
            syn::Item::Macro(i) => i.ident.as_ref(),
            syn::Item::Static(i) => Some(&i.ident),
            syn::Item::Struct(i) => Some(&i.ident),
            syn::Item::Trait(i) => Some(&i.ident),
            syn::Item::TraitAlias(i) => Some(&i.ident),
            syn::Item::Type(i) => Some(&i.ident),
            syn::Item::Union(i) => Some(&i.ident),
            syn::Item::Use(i) => {
                for leaf in use_leaves(&i.tree) {
                    if leaf.glob {
                        self.modules[id].globs.push(leaf.path);
                    } else if let Some(name) = leaf.name {
                        self.modules[id]
                            .bindings
                            .push((name, Binding::Use(leaf.path)));
                    }
                }
                None
            }
            _ => None,
        };
        if let Some(ident) = ident {
            self.modules[id]
                .bindings
                .push((ident.to_string(), Binding::Item));
        }
    }
}

/// Flattens a `use` tree into its leaves (`use a::{b, c::d as e, f::*}` gives three).
pub fn use_leaves(tree: &syn::UseTree) -> Vec<UseLeaf> {
    let mut leaves = Vec::new();
    walk_use(tree, &mut Vec::new(), &mut leaves);
    leaves
}

fn walk_use(tree: &syn::UseTree, prefix: &mut Vec<String>, leaves: &mut Vec<UseLeaf>) {
    match tree {
        syn::UseTree::Path(path) => {
            prefix.push(path.ident.to_string());
            walk_use(&path.tree, prefix, leaves);
            prefix.pop();
        }
        syn::UseTree::Name(name) => leaves.push(leaf(prefix, &name.ident, None)),
        syn::UseTree::Rename(rename) => {
            leaves.push(leaf(prefix, &rename.ident, Some(&rename.rename)));
        }
        syn::UseTree::Glob(glob) => leaves.push(UseLeaf {
            path: prefix.clone(),
            name: None,
            glob: true,
            line: glob.star_token.spans[0].start().line,
        }),
        syn::UseTree::Group(group) => {
            for tree in &group.items {
                walk_use(tree, prefix, leaves);
            }
        }
    }
}

fn leaf(prefix: &[String], ident: &syn::Ident, rename: Option<&syn::Ident>) -> UseLeaf {
    // `use a::b::{self}` imports `b` itself.
    let (path, default_name) = if ident == "self" {
        (prefix.to_vec(), prefix.last().cloned())
    } else {
        let mut path = prefix.to_vec();
        path.push(ident.to_string());
        (path, Some(ident.to_string()))
    };
    let name = match rename {
        Some(rename) if rename == "_" => None,
        Some(rename) => Some(rename.to_string()),
        None => default_name,
    };
    UseLeaf {
        path,
        name,
        glob: false,
        line: ident.span().start().line,
    }
}

fn path_attribute(attrs: &[syn::Attribute]) -> Option<String> {
    attrs.iter().find_map(|attr| {
        if !attr.path().is_ident("path") {
            return None;
        }
        let syn::Meta::NameValue(name_value) = &attr.meta else {
            return None;
        };
        match &name_value.value {
            syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(text),
                ..
            }) => Some(text.value()),
            _ => None,
        }
    })
}

fn parse(path: &Path) -> Result<syn::File, LoadError> {
    let text = std::fs::read_to_string(path).map_err(|source| LoadError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    syn::parse_file(&text).map_err(|error| LoadError::Parse {
        path: path.to_path_buf(),
        line: error.span().start().line,
        message: error.to_string(),
    })
}

//! [`RouteTable`]: a listener's method routing, the same type for
//! validation (upstream names) and for the router (started upstreams).

/// Method routing of one listener: longest matching prefix wins, else the
/// default upstream. Validated with upstream names (`U = String`); the
/// router resolves the same table to started upstreams with
/// [`RouteTable::resolve`], so the lookup is written once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteTable<U = String> {
    /// Upstream for every method no prefix route matches; `None` answers
    /// such methods with `method_not_found`.
    pub default: Option<U>,
    /// `(method prefix, upstream)`, longest prefix first.
    pub prefixes: Vec<(String, U)>,
}

// === impl RouteTable ===

impl<U> RouteTable<U> {
    /// The upstream serving `method`, if any.
    pub fn upstream_for(&self, method: &str) -> Option<&U> {
        self.prefixes
            .iter()
            .find(|(prefix, _)| method.starts_with(prefix.as_str()))
            .map(|(_, up)| up)
            .or(self.default.as_ref())
    }

    /// Every upstream the table names (the default first), repeats
    /// included.
    pub fn upstreams(&self) -> impl Iterator<Item = &U> {
        self.default
            .iter()
            .chain(self.prefixes.iter().map(|(_, u)| u))
    }

    /// The same table with each upstream mapped by `f`; entries `f` maps
    /// to `None` are dropped (that method then has no route).
    pub fn resolve<V>(&self, mut f: impl FnMut(&U) -> Option<V>) -> RouteTable<V> {
        RouteTable {
            default: self.default.as_ref().and_then(&mut f),
            prefixes: self
                .prefixes
                .iter()
                .filter_map(|(p, u)| f(u).map(|v| (p.clone(), v)))
                .collect(),
        }
    }
}

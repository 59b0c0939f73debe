//! Applying a new configuration to the running gateway (SIGHUP,
//! `POST /reload`, [`super::Running::reload`]).
//!
//! The file and environment are read and validated exactly as at start;
//! any problem rejects the reload and the running configuration serves on.
//! Otherwise, in this order: new listener sockets are bound (a failure
//! rejects the whole reload, nothing changed yet); new and changed
//! upstreams are started; every listener (with its router) is rebuilt and
//! swapped into its cell (the next request admitted sees it; calls in
//! flight finish on the router they started with); new listeners start serving; removed
//! listeners stop accepting and drain as on shutdown; removed and replaced
//! upstreams drain, then close. A listener whose address, path or dialect
//! changes is removed and added; on a WebSocket address that keeps serving,
//! listeners join and leave by path. Rejected: new TLS files for an address
//! in use, a new name for the listener of a Unix socket that stays.
//!
//! What applies to established connections: routes, method policy, rate
//! limits (a connection whose listener's rates changed gets a fresh bucket
//! of its own), connection caps (counted over the connections already
//! open), `max_batch_items`, request timeouts, the slow-consumer timeout,
//! the `[pubsub]` bounds (to the next subscribe; patterns held stay).
//! What applies to new connections only, being fixed when a connection
//! opens: `max_in_flight`, `outbox_capacity`, `outbox_max_bytes`,
//! `max_message_bytes`,
//! `max_unanswered_pushes` and the push timeout, ping, pong, idle and
//! lifetime timers, the Sideband settings, and the Host, Origin and token
//! checks (made at the upgrade). A reload that changes `[persistence]` or
//! `[[persistent_topics]]` is rejected as a whole: the store is opened
//! once, with its topics and retention, and keeps serving across reloads;
//! so is one that changes `[pubsub] backend` or `[pubsub.nats]`. A per-client upstream's
//! dedicated connection stays with the definition it was opened under
//! until its client leaves. Needing a restart: `[admin] address`,
//! `log.format`, `gateway.worker_threads`, and turning trace export on or
//! off or moving it (`tracing.enabled`, `endpoint`, `service_name`); a
//! reload changing them is applied otherwise and says so in the log. A
//! listener added or moved is logged with its new address (`listening`).

use std::collections::{HashMap, HashSet};

use super::binding::{bind_groups, key_of, same_listener, GroupKey};
use super::live::{start_upstream, Live};
use super::{Outcome, CLOSE_SLACK};
use crate::config::{Config, ListenAddr};
use crate::limits::rate::PRUNE_INTERVAL;
use crate::transport::ListenerCell;

// === impl Live ===

impl Live {
    /// Loads, checks and applies the configuration; see the module docs.
    pub(super) async fn reload(&mut self) -> Outcome {
        let outcome = self.try_reload().await;
        match &outcome {
            Ok(generation) => {
                self.metrics.config_reloads.with_label_values(&["ok"]).inc();
                self.metrics.config_generation.set(gauge(*generation));
                self.record.applied(*generation);
                tracing::info!(generation, "configuration reloaded");
            }
            Err(problems) => {
                self.metrics
                    .config_reloads
                    .with_label_values(&["rejected"])
                    .inc();
                let first = problems.first().map_or("", String::as_str);
                self.record.rejected(first);
                for problem in problems {
                    tracing::error!(%problem, "configuration reload rejected");
                }
            }
        }
        outcome
    }

    async fn try_reload(&mut self) -> Outcome {
        let Some(file) = self.source.clone() else {
            return Err(vec![
                "this gateway was not started from a configuration to reload".to_owned(),
            ]);
        };
        match &file {
            Some(path) => {
                tracing::info!(file = %path.display(), "reloading the configuration");
            }
            None => tracing::info!("reloading the configuration (environment only)"),
        }
        let cfg = Config::load(file.as_deref()).map_err(|e| e.problems().to_vec())?;
        // Where each listener was reached, to name the ones that move.
        let before: HashMap<String, String> = super::addresses(&self.cfg, &self.addrs)
            .into_iter()
            .map(|(l, address)| (l.name.clone(), address))
            .collect();
        self.check_groups(&cfg)?;
        if cfg.persistence != self.cfg.persistence {
            return Err(vec![
                "[persistence] and [[persistent_topics]] apply at start only (the store is \
                 opened once); restart switchyard to change them"
                    .to_owned(),
            ]);
        }
        if cfg.pubsub_nats != self.cfg.pubsub_nats {
            return Err(vec![
                "[pubsub] backend and [pubsub.nats] apply at start only (the backbone \
                 connects once); restart switchyard to change them"
                    .to_owned(),
            ]);
        }
        let kept: HashSet<GroupKey> = self.groups.iter().map(|g| g.key.clone()).collect();
        // Bound first: a bind failure leaves everything as it was.
        let (added, addrs) = bind_groups(&cfg, |k| !kept.contains(k))
            .await
            .map_err(|e| vec![e.to_string()])?;
        self.warn_restart_only(&cfg);
        for warning in cfg.warnings() {
            tracing::warn!("{warning}");
        }
        self.broker.set_limits(cfg.pubsub);
        let old = std::mem::replace(&mut self.cfg, cfg);
        let patience = old
            .listeners
            .iter()
            .map(|l| l.request_timeout)
            .max()
            .unwrap_or_default()
            + CLOSE_SLACK;
        // Upstreams: removed or changed ones leave the table now (and drain
        // below); added or changed ones start.
        let mut retired = Vec::new();
        for name in old.upstreams.iter().map(|u| &u.name) {
            let same = self.cfg.upstream(name) == old.upstream(name);
            if !same {
                if let Some(u) = old.upstream(name) {
                    self.metrics.forget_upstream(u);
                }
                if let Some(started) = self.upstreams.remove(name) {
                    retired.push(started);
                }
            }
        }
        for u in &self.cfg.upstreams {
            if !self.upstreams.contains_key(&u.name) {
                let started = start_upstream(
                    u,
                    &self.metrics,
                    &self.events(),
                    &self.ctx.shutdown,
                    &self.upstream_stop,
                );
                self.upstreams.insert(u.name.clone(), started);
            }
        }
        self.metrics.init_labels(&self.cfg);
        // Listeners: removed ones (and the old side of replaced ones) stop;
        // the others get their new generation; added ones start serving.
        let (stopped, groups): (Vec<_>, Vec<_>) = std::mem::take(&mut self.groups)
            .into_iter()
            .partition(|g| !self.cfg.listeners.iter().any(|l| key_of(l) == g.key));
        self.groups = groups;
        for group in &stopped {
            self.stop_group(group);
            for name in &group.names {
                self.cells.remove(name);
                self.addrs.remove(name);
            }
        }
        let joining = self.leave_kept_groups(&old);
        for (name, listener) in self.listeners() {
            // Rates a reload changed are new state to prune (a no-op when
            // the listener kept its rates).
            listener
                .rate()
                .start_pruning(PRUNE_INTERVAL, self.ctx.shutdown.clone());
            match self.cells.get(&name) {
                Some(cell) => {
                    cell.store(listener);
                }
                None => {
                    self.cells.insert(name, ListenerCell::new(listener));
                }
            }
        }
        for (index, name) in joining {
            self.join_group(index, &name);
        }
        self.apply_unix_modes(&old);
        self.addrs.extend(addrs);
        self.servers.reopen();
        for group in added {
            self.serve_group(group);
        }
        self.servers.close();
        for started in retired {
            self.retire(started, patience);
        }
        crate::telemetry::live::set_log_level(&self.cfg.log.level);
        crate::telemetry::live::set_sampling_ratio(self.cfg.tracing.sampling_ratio);
        crate::telemetry::set_record_ids(self.cfg.tracing.record_ids);
        for (l, address) in super::addresses(&self.cfg, &self.addrs) {
            if before.get(&l.name) != Some(&address) {
                super::log_listening(l, &address);
            }
        }
        self.generation += 1;
        *self.current.write() = super::live::by_name(&self.upstreams);
        if let Some(view) = &self.view {
            view.store(self.gateway());
        }
        Ok(self.generation)
    }

    /// On the WebSocket addresses that keep serving, stops the listeners
    /// the new configuration drops or replaces; returns those it adds
    /// there (group index, name), to join once their cells exist.
    fn leave_kept_groups(&mut self, old: &Config) -> Vec<(usize, String)> {
        let mut joining = Vec::new();
        for index in 0..self.groups.len() {
            let group = &self.groups[index];
            let (key, names) = (group.key.clone(), group.names.clone());
            if !matches!(key, GroupKey::Ws(_)) {
                continue;
            }
            for name in names {
                let Some(before) = old.listeners.iter().find(|l| l.name == name) else {
                    continue;
                };
                let kept = self.cfg.listeners.iter().any(|l| same_listener(before, l));
                if let (false, ListenAddr::Ws { path, .. }) = (kept, &before.addr) {
                    self.leave_group(index, &name, path);
                }
            }
            let members = &self.groups[index].names;
            let new = self.cfg.listeners.iter().filter(|l| key_of(l) == key);
            for l in new.filter(|l| !members.contains(&l.name)) {
                joining.push((index, l.name.clone()));
            }
        }
        joining
    }

    /// Problems with serving `cfg` on the groups running now. A WebSocket
    /// address that keeps serving keeps its TLS certificate and key (its
    /// listeners may change); a Unix socket that stays must keep its
    /// listener's name. Listeners on a new address, and removing every
    /// listener of an address, are fine.
    fn check_groups(&self, cfg: &Config) -> Result<(), Vec<String>> {
        let mut problems = Vec::new();
        for group in &self.groups {
            let new: Vec<_> = cfg
                .listeners
                .iter()
                .filter(|l| key_of(l) == group.key)
                .collect();
            if new.is_empty() {
                continue;
            }
            let same = match &group.key {
                GroupKey::Ws(_) => {
                    let before = self.cfg.listeners.iter().find(|l| key_of(l) == group.key);
                    let tls = before.map(|l| &l.tls);
                    new.iter().all(|l| tls == Some(&l.tls))
                }
                GroupKey::Unix(_) => new
                    .iter()
                    .all(|l| self.cfg.listeners.iter().any(|o| same_listener(o, l))),
            };
            if !same {
                let at = match &group.key {
                    GroupKey::Ws(addr) => addr.to_string(),
                    GroupKey::Unix(path) => path.display().to_string(),
                };
                problems.push(format!(
                    "listeners on {at}: changing the TLS files of an address (or renaming the \
                     listener of a socket) that stays in use needs a restart (or another address)"
                ));
            }
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems)
        }
    }

    /// Unix sockets kept across the reload get their new file mode.
    fn apply_unix_modes(&self, old: &Config) {
        for l in &self.cfg.listeners {
            let ListenAddr::Unix { path, mode } = &l.addr else {
                continue;
            };
            let before = old.listeners.iter().find_map(|o| match &o.addr {
                ListenAddr::Unix { path: p, mode: m } if p == path => Some(*m),
                _ => None,
            });
            if before.is_some_and(|m| m != *mode) {
                use std::os::unix::fs::PermissionsExt;
                let perms = std::fs::Permissions::from_mode(*mode);
                if let Err(e) = std::fs::set_permissions(path, perms) {
                    tracing::warn!(listener = %l.name, error = %e, "socket mode not changed");
                }
            }
        }
    }

    /// Logs the settings a reload cannot apply (they need a restart).
    fn warn_restart_only(&self, cfg: &Config) {
        let (old, new) = (&self.cfg, cfg);
        let mut restart = Vec::new();
        if old.admin.addr != new.admin.addr {
            restart.push("admin.address");
        }
        if old.log.format != new.log.format {
            restart.push("log.format");
        }
        if old.gateway.worker_threads != new.gateway.worker_threads {
            restart.push("gateway.worker_threads");
        }
        let (a, b) = (&old.tracing, &new.tracing);
        if a.enabled != b.enabled || a.endpoint != b.endpoint || a.service_name != b.service_name {
            restart.push("tracing.enabled/endpoint/service_name");
        }
        for key in restart {
            tracing::warn!(key, "changed, but applies only after a restart");
        }
    }
}

/// A generation as a gauge value.
fn gauge(generation: u64) -> i64 {
    i64::try_from(generation).unwrap_or(i64::MAX)
}

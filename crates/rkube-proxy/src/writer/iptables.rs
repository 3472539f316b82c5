//! `iptables-restore` input in kube-proxy's chain layout.
//!
//! Follows upstream `pkg/proxy/iptables/proxier.go` (`syncProxyRules`,
//! `writeServiceToEndpointRules`): the `filter` table's KUBE-SERVICES,
//! KUBE-EXTERNAL-SERVICES, KUBE-FORWARD, KUBE-NODEPORTS and KUBE-PROXY-FIREWALL
//! chains and the `nat` table's KUBE-SERVICES, KUBE-NODEPORTS,
//! KUBE-POSTROUTING and KUBE-MARK-MASQ chains are written whole on every
//! sync; per service port the KUBE-SVC/SVL/EXT/FW chains and per endpoint the
//! KUBE-SEP chains are written on full syncs and, on partial syncs (KEP-3453),
//! only for services that changed. Chains no longer needed are declared and
//! deleted (`:X - [0:0]` … `-X X`) in the same input, since iptables-restore
//! refuses to delete a chain it was not told about.
//!
//! Output order: `*filter`, chain lines, rules grouped by chain, `COMMIT`,
//! then the same for `*nat` with stale-chain `-X` lines last. Services are
//! written in `ServicePortName` order, so equal state gives equal bytes.
//!
//! Three choices serve `iptables-nft-restore` (1.8.x), whose cost is otherwise
//! quadratic in the number of chains (about 60,000 at 10,000 services × 5
//! endpoints; measured > 14 min for one full restore):
//! - Per-service chains are declared in *descending* name order. iptables-nft
//!   keeps user chains, and the chain names a transaction needs, in lists
//!   sorted by name that it scans from the head on every insert; descending
//!   declarations make each insert stop at the head (upstream kube-proxy
//!   declares them in service order, which costs a scan of half the list each).
//! - With [`IptablesWriter::split_nat`] (the engine sets it for the nf_tables
//!   backend), the per-service chains of a sync are written as several `*nat` …
//!   `COMMIT` transactions of about [`NAT_TRANSACTION_CHAINS`] chains each (a
//!   service's chains never straddle two), `KUBE-MARK-MASQ` in the first, and the
//!   top-level nat chains with the rest of the per-service chains and the
//!   stale-chain deletions in a last one (so small syncs stay one transaction). Every
//!   rule only jumps to chains of its own or an earlier transaction, so each
//!   intermediate state is consistent; KUBE-SERVICES switches to the new chains in
//!   the last one, as in a single transaction. The legacy backend replaces the
//!   whole table on every `COMMIT`, so it keeps one nat transaction.
//! - The per-service rules of the nat KUBE-SERVICES and KUBE-NODEPORTS chains are
//!   ordered by jump target, descending, for the same reason (each jump target
//!   joins the sorted list); KUBE-SERVICES's node-port rule stays last. Their
//!   matches are disjoint, so the order carries no meaning (upstream writes them in
//!   Go map order).

use std::collections::HashSet;
use std::fmt::{self, Write as _};

use crate::chains::{
    self, Chain, KUBE_EXTERNAL_SERVICES, KUBE_FORWARD, KUBE_MARK_MASQ, KUBE_NODEPORTS, KUBE_POSTROUTING,
    KUBE_PROXY_FIREWALL, KUBE_SERVICES,
};
use crate::model::{EndpointInfo, LABEL_TOPOLOGY_ZONE};
use crate::plan::{NoEndpointsTarget, ServicePortPlan};
use crate::writer::{RuleWriter, SyncMode, SyncRequest};

/// Per-service chains per nat transaction when [`IptablesWriter::split_nat`] is on.
/// Each transaction costs the kernel a walk of every chain reachable from the
/// built-in ones when it commits, while iptables-nft's per-transaction cost grows
/// with the square of its size; at 10,000 services × 5 endpoints (60,000 chains)
/// 512 chains took 30 s for a full resync, 3,000–6,000 about 15 s, 15,000 44 s.
pub const NAT_TRANSACTION_CHAINS: usize = 4096;

/// The generated restore input and what it implies.
#[derive(Debug, Clone, Default)]
pub struct RestoreInput {
    /// Bytes for `iptables-restore --noflush --counters`.
    pub data: String,
    /// Per-service nat chains that exist once this input is applied.
    pub active_chains: HashSet<Chain>,
    /// Service ports whose per-service chains were written.
    pub services_written: usize,
    /// Stale per-service chains deleted by this input.
    pub chains_deleted: usize,
    /// Rules in the nat table after this sync (written or left unchanged).
    pub nat_rules_total: usize,
    /// nat rules written by this input.
    pub nat_rules_written: usize,
    /// filter rules written (the filter table is always written whole).
    pub filter_rules: usize,
    /// `*nat` … `COMMIT` transactions in `data`.
    pub nat_transactions: usize,
}

/// A growing set of restore lines that can also just count (for skipped services).
#[derive(Debug, Default)]
struct Lines {
    buf: String,
    /// Lines appended, written or only counted.
    count: usize,
    /// Lines actually written into `buf`.
    written: usize,
}

impl Lines {
    /// Move the written text out, keeping the counts.
    fn take_text_into(&mut self, out: &mut String) {
        out.push_str(&self.buf);
        self.buf.clear();
    }

    fn clear(&mut self) {
        self.buf.clear();
        self.count = 0;
        self.written = 0;
    }

    /// Reorder the lines by their jump target (last word), descending; lines with the
    /// same target keep their order.
    fn sort_by_target_descending(&mut self) {
        fn target(line: &str) -> &str {
            line.rsplit(' ').next().unwrap_or("")
        }
        let mut lines: Vec<&str> = self.buf.lines().collect();
        lines.sort_by(|a, b| target(b).cmp(target(a)));
        let mut sorted = String::with_capacity(self.buf.len());
        for l in lines {
            sorted.push_str(l);
            sorted.push('\n');
        }
        self.buf = sorted;
    }

    /// Append one line (formatted only if `write` is set).
    fn line(&mut self, write: bool, args: fmt::Arguments<'_>) {
        self.count += 1;
        if write {
            self.written += 1;
            // Writing into a String cannot fail.
            let _ = self.buf.write_fmt(args);
            self.buf.push('\n');
        }
    }
}

/// `-m comment --comment <text> ` unless comments are dropped (large clusters).
struct Comment<'a>(Option<&'a dyn fmt::Display>);

impl fmt::Display for Comment<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(text) => write!(f, "-m comment --comment {text} "),
            None => Ok(()),
        }
    }
}

/// `"<svc> -> <ip:port>"`.
struct ToEndpoint<'a>(&'a str, &'a str);

impl fmt::Display for ToEndpoint<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "\"{} -> {}\"", self.0, self.1)
    }
}

/// The iptables backend's writer. Keeps its buffers between syncs.
#[derive(Debug, Default)]
pub struct IptablesWriter {
    filter_services: Lines,
    filter_external: Lines,
    filter_nodeports: Lines,
    filter_firewall: Lines,
    nat_services: Lines,
    nat_nodeports: Lines,
    nat_per_service: Lines,
    /// Per-service chains declared in the open nat transaction.
    declared: Vec<Chain>,
    /// Completed per-service nat transactions (split mode).
    transactions: String,
    transaction_count: usize,
    /// Per-service chains per nat transaction; `None`: one nat transaction.
    split_nat: Option<usize>,
    probabilities: Vec<String>,
}

impl IptablesWriter {
    /// A writer with empty buffers.
    pub fn new() -> Self {
        Self::default()
    }

    /// Write the per-service nat chains in transactions of about `chains` chains
    /// (see the module docs; `None`: a single nat transaction, as upstream).
    pub fn split_nat(&mut self, chains: Option<usize>) {
        self.split_nat = chains.map(|c| c.max(1));
    }

    /// Whether per-service chains are split over several nat transactions.
    pub fn splits_nat(&self) -> bool {
        self.split_nat.is_some()
    }

    /// Close the open nat transaction (split mode): its declarations in descending
    /// order, then its rules; the first one also carries KUBE-MARK-MASQ.
    fn close_transaction(&mut self, mark: &str) {
        if self.declared.is_empty() {
            return;
        }
        let first = self.transaction_count == 0;
        self.transaction_count += 1;
        let out = &mut self.transactions;
        out.push_str("*nat\n");
        if first {
            let _ = writeln!(out, ":{KUBE_MARK_MASQ} - [0:0]");
        }
        self.declared.sort_unstable_by(|a, b| b.cmp(a));
        for c in &self.declared {
            let _ = writeln!(out, ":{c} - [0:0]");
        }
        if first {
            let _ = writeln!(out, "-A {KUBE_MARK_MASQ} -j MARK --or-mark {mark}");
        }
        self.nat_per_service.take_text_into(out);
        out.push_str("COMMIT\n");
        self.declared.clear();
    }

    /// `1/n` with 10 decimals (upstream `computeProbability`), cached.
    fn probability(&mut self, n: usize) -> &str {
        while self.probabilities.len() <= n {
            let k = self.probabilities.len();
            self.probabilities.push(if k == 0 { String::new() } else { format!("{:.10}", 1.0 / k as f64) });
        }
        &self.probabilities[n]
    }

    fn clear(&mut self) {
        for l in [
            &mut self.filter_services,
            &mut self.filter_external,
            &mut self.filter_nodeports,
            &mut self.filter_firewall,
            &mut self.nat_services,
            &mut self.nat_nodeports,
            &mut self.nat_per_service,
        ] {
            l.clear();
        }
        self.declared.clear();
        self.transactions.clear();
        self.transaction_count = 0;
    }

    /// Top-level rules for one service port (always written).
    fn write_entry_rules(&mut self, plan: &ServicePortPlan<'_>) {
        let svc = plan.svc;
        let name = &svc.name_string;
        let proto = svc.name.protocol.lower();
        let no_ep_comment = |t: NoEndpointsTarget| match t {
            NoEndpointsTarget::Reject => "has no endpoints",
            NoEndpointsTarget::Drop => "has no local endpoints",
        };

        // ClusterIP.
        if plan.has_internal_endpoints {
            self.nat_services.line(true, format_args!(
                "-A {KUBE_SERVICES} -m comment --comment \"{name} cluster IP\" -m {proto} -p {proto} -d {} --dport {} -j {}",
                svc.cluster_ip, svc.port, plan.internal_chain
            ));
        } else if let Some(t) = plan.internal_no_endpoints {
            self.filter_services.line(true, format_args!(
                "-A {KUBE_SERVICES} -m comment --comment \"{name} {}\" -m {proto} -p {proto} -d {} --dport {} -j {}",
                no_ep_comment(t), svc.cluster_ip, svc.port, t.target()
            ));
        }

        // External IPs.
        for ip in &svc.external_ips {
            if plan.has_endpoints {
                self.nat_services.line(true, format_args!(
                    "-A {KUBE_SERVICES} -m comment --comment \"{name} external IP\" -m {proto} -p {proto} -d {ip} --dport {} -j {}",
                    svc.port, svc.chains.external
                ));
            }
            if let Some(t) = plan.external_no_endpoints {
                self.filter_external.line(true, format_args!(
                    "-A {KUBE_EXTERNAL_SERVICES} -m comment --comment \"{name} {}\" -m {proto} -p {proto} -d {ip} --dport {} -j {}",
                    no_ep_comment(t), svc.port, t.target()
                ));
            }
        }

        // LoadBalancer ingress IPs.
        for ip in &svc.load_balancer_vips {
            if plan.has_endpoints {
                self.nat_services.line(true, format_args!(
                    "-A {KUBE_SERVICES} -m comment --comment \"{name} loadbalancer IP\" -m {proto} -p {proto} -d {ip} --dport {} -j {}",
                    svc.port, plan.load_balancer_chain
                ));
            }
            if plan.uses_firewall_chain {
                self.filter_firewall.line(true, format_args!(
                    "-A {KUBE_PROXY_FIREWALL} -m comment --comment \"{name} traffic not accepted by {}\" -m {proto} -p {proto} -d {ip} --dport {} -j DROP",
                    svc.chains.firewall, svc.port
                ));
            }
        }
        if let Some(t) = plan.external_no_endpoints {
            for ip in &svc.load_balancer_vips {
                self.filter_external.line(true, format_args!(
                    "-A {KUBE_EXTERNAL_SERVICES} -m comment --comment \"{name} {}\" -m {proto} -p {proto} -d {ip} --dport {} -j {}",
                    no_ep_comment(t), svc.port, t.target()
                ));
            }
        }

        // NodePort.
        if svc.node_port != 0 {
            if plan.has_endpoints {
                self.nat_nodeports.line(true, format_args!(
                    "-A {KUBE_NODEPORTS} -m comment --comment {name} -m {proto} -p {proto} --dport {} -j {}",
                    svc.node_port, svc.chains.external
                ));
            }
            if let Some(t) = plan.external_no_endpoints {
                self.filter_external.line(true, format_args!(
                    "-A {KUBE_EXTERNAL_SERVICES} -m comment --comment \"{name} {}\" -m addrtype --dst-type LOCAL -m {proto} -p {proto} --dport {} -j {}",
                    no_ep_comment(t), svc.node_port, t.target()
                ));
            }
        }

        // Health check node port.
        if svc.health_check_node_port != 0 {
            self.filter_nodeports.line(true, format_args!(
                "-A {KUBE_NODEPORTS} -m comment --comment \"{name} health check node port\" -m tcp -p tcp --dport {} -j ACCEPT",
                svc.health_check_node_port
            ));
        }
    }

    /// Per-service chains (SVC/SVL/EXT/FW/SEP); only counted when `write` is false.
    fn write_service_chains(&mut self, plan: &ServicePortPlan<'_>, req: &SyncRequest<'_>, write: bool) {
        let svc = plan.svc;
        let name = &svc.name_string;
        let proto = svc.name.protocol.lower();
        let cfg = req.config;

        if write {
            self.declared.extend(plan.chains().cloned());
        }

        // Masquerade rule at the head of the internal chain.
        let mut internal_head = false;
        if plan.has_internal_endpoints && (cfg.masquerade_all || cfg.cluster_cidr.is_some()) {
            internal_head = true;
        }

        // EXT chain.
        if plan.uses_external_chain {
            let ext = &svc.chains.external;
            if !svc.external_policy_local {
                self.nat_per_service.line(write, format_args!(
                    "-A {ext} -m comment --comment \"masquerade traffic for {name} external destinations\" -j {KUBE_MARK_MASQ}"
                ));
            } else {
                if let Some(cidr) = &cfg.cluster_cidr {
                    self.nat_per_service.line(write, format_args!(
                        "-A {ext} -m comment --comment \"pod traffic for {name} external destinations\" -s {cidr} -j {}",
                        svc.chains.cluster
                    ));
                }
                self.nat_per_service.line(write, format_args!(
                    "-A {ext} -m comment --comment \"masquerade LOCAL traffic for {name} external destinations\" -m addrtype --src-type LOCAL -j {KUBE_MARK_MASQ}"
                ));
                self.nat_per_service.line(write, format_args!(
                    "-A {ext} -m comment --comment \"route LOCAL traffic for {name} external destinations\" -m addrtype --src-type LOCAL -j {}",
                    svc.chains.cluster
                ));
            }
            if plan.has_external_endpoints {
                self.nat_per_service.line(write, format_args!("-A {ext} -j {}", plan.external_policy_chain));
            }
        }

        // FW chain.
        if plan.uses_firewall_chain {
            let fw = &svc.chains.firewall;
            let ext = &svc.chains.external;
            let mut allow_from_node = false;
            for cidr in &svc.load_balancer_source_ranges {
                self.nat_per_service.line(write, format_args!(
                    "-A {fw} -m comment --comment \"{name} loadbalancer IP\" -s {cidr} -j {ext}"
                ));
                allow_from_node |= cfg.node_ip.is_some_and(|ip| cidr.contains(ip));
            }
            if allow_from_node {
                for ip in &svc.load_balancer_vips {
                    self.nat_per_service.line(write, format_args!(
                        "-A {fw} -m comment --comment \"{name} loadbalancer IP\" -s {ip} -j {ext}"
                    ));
                }
            }
            self.nat_per_service.line(write, format_args!(
                "-A {fw} -m comment --comment \"other traffic to {name} will be dropped by KUBE-PROXY-FIREWALL\""
            ));
        }

        // SVC and SVL chains.
        let policy_chains = [
            (plan.uses_cluster_chain, &svc.chains.cluster, &plan.cluster_endpoints),
            (plan.uses_local_chain, &svc.chains.local, &plan.local_endpoints),
        ];
        for (used, chain, endpoints) in policy_chains {
            if !used {
                continue;
            }
            if internal_head && chain == plan.internal_chain {
                let masq_source = match (&cfg.masquerade_all, &cfg.cluster_cidr) {
                    (true, _) => String::new(),
                    (false, Some(cidr)) => format!("! -s {cidr} "),
                    (false, None) => String::new(),
                };
                self.nat_per_service.line(write, format_args!(
                    "-A {chain} -m comment --comment \"{name} cluster IP\" -m {proto} -p {proto} -d {} --dport {} {masq_source}-j {KUBE_MARK_MASQ}",
                    svc.cluster_ip, svc.port
                ));
            }
            self.write_endpoint_jumps(plan, chain, endpoints, req.large_cluster_mode, write);
        }

        // SEP chains.
        for ep in &plan.all_reachable {
            let sep = &ep.chain;
            let comment_text: &dyn fmt::Display = name;
            let comment = Comment((!req.large_cluster_mode).then_some(comment_text));
            self.nat_per_service.line(write, format_args!("-A {sep} {comment}-s {} -j {KUBE_MARK_MASQ}", ep.ip));
            match svc.session_affinity_seconds {
                Some(_) => self.nat_per_service.line(write, format_args!(
                    "-A {sep} {comment}-m recent --name {sep} --set -m {proto} -p {proto} -j DNAT --to-destination {}",
                    ep.addr
                )),
                None => self.nat_per_service.line(write, format_args!(
                    "-A {sep} {comment}-m {proto} -p {proto} -j DNAT --to-destination {}",
                    ep.addr
                )),
            }
        }
    }

    /// Session-affinity and load-balancing jumps from a policy chain to its endpoints.
    fn write_endpoint_jumps(
        &mut self,
        plan: &ServicePortPlan<'_>,
        chain: &Chain,
        endpoints: &[&EndpointInfo],
        large: bool,
        write: bool,
    ) {
        let name = plan.svc.name_string.as_str();
        if let Some(seconds) = plan.svc.session_affinity_seconds {
            for ep in endpoints {
                let text = ToEndpoint(name, &ep.addr);
                let comment = Comment((!large).then_some(&text as &dyn fmt::Display));
                self.nat_per_service.line(write, format_args!(
                    "-A {chain} {comment}-m recent --name {} --rcheck --seconds {seconds} --reap -j {}",
                    ep.chain, ep.chain
                ));
            }
        }
        let n = endpoints.len();
        for (i, ep) in endpoints.iter().enumerate() {
            let text = ToEndpoint(name, &ep.addr);
            let comment = Comment((!large).then_some(&text as &dyn fmt::Display));
            if i + 1 < n {
                if write {
                    self.probability(n - i);
                }
                let p = self.probabilities.get(n - i).map(String::as_str).unwrap_or("");
                self.nat_per_service.line(write, format_args!(
                    "-A {chain} {comment}-m statistic --mode random --probability {p} -j {}",
                    ep.chain
                ));
            } else {
                self.nat_per_service.line(write, format_args!("-A {chain} {comment}-j {}", ep.chain));
            }
        }
    }
}

impl RuleWriter for IptablesWriter {
    type Output = RestoreInput;

    fn write(&mut self, req: &SyncRequest<'_>) -> RestoreInput {
        self.clear();
        let cfg = req.config;
        let tracker = req.tracker;
        let zone = tracker.node_labels().get(LABEL_TOPOLOGY_ZONE).map(String::as_str);
        let mut active_chains = HashSet::with_capacity(req.programmed_chains.len());
        let mut services_written = 0;

        for svc in tracker.service_ports() {
            let plan = ServicePortPlan::new(svc, tracker.endpoints(&svc.name), zone);
            self.write_entry_rules(&plan);
            let write_chains = match req.mode {
                SyncMode::Full => true,
                // Also rewrite a service whose chains are not all known to exist, so a
                // jump in KUBE-SERVICES never names a missing chain (kubernetes#121362).
                SyncMode::Partial { changed } => {
                    changed.contains(&svc.name.service)
                        || plan.chains().any(|c| !req.programmed_chains.contains(c))
                }
            };
            services_written += usize::from(write_chains);
            active_chains.extend(plan.chains().cloned());
            self.write_service_chains(&plan, req, write_chains);
            if self.split_nat.is_some_and(|limit| self.declared.len() >= limit) {
                self.close_transaction(&cfg.masquerade_mark);
            }
        }
        // Chains of a last, incomplete transaction stay in the top-level one: a
        // partial sync is a single nat transaction (each COMMIT makes the kernel
        // validate every chain reachable from the built-in ones).
        let mark = &cfg.masquerade_mark;
        self.nat_services.sort_by_target_descending();
        self.nat_nodeports.sort_by_target_descending();
        // KUBE-MARK-MASQ goes with the first per-service transaction when there is one.
        let mark_masq_in_last = self.transaction_count == 0;

        // Stale per-service chains: known (or, on full syncs, seen) but no longer active.
        let candidates: Box<dyn Iterator<Item = &Chain>> = match req.mode {
            SyncMode::Full => Box::new(req.programmed_chains.iter().chain(req.existing_chains.iter())),
            SyncMode::Partial { .. } => Box::new(req.programmed_chains.iter()),
        };
        let mut stale: Vec<&Chain> = candidates
            .filter(|c| !active_chains.contains(*c) && chains::is_service_chain(c.as_str()))
            .collect();
        stale.sort();
        stale.dedup();

        // Tail of nat KUBE-SERVICES: hand node-local destinations to KUBE-NODEPORTS.
        let tail_comment = "\"kubernetes service nodeports; NOTE: this must be the last rule in this chain\"";
        if cfg.node_port_addresses.is_empty() {
            self.nat_services.line(true, format_args!(
                "-A {KUBE_SERVICES} -m comment --comment {tail_comment} -m addrtype --dst-type LOCAL ! -d 127.0.0.0/8 -j {KUBE_NODEPORTS}"
            ));
        } else {
            for ip in req.node_ips.iter().filter(|ip| !ip.is_loopback()) {
                self.nat_services.line(true, format_args!(
                    "-A {KUBE_SERVICES} -m comment --comment {tail_comment} -d {ip} -j {KUBE_NODEPORTS}"
                ));
            }
        }

        let mut out = String::with_capacity(
            self.filter_services.buf.len()
                + self.filter_external.buf.len()
                + self.nat_services.buf.len()
                + self.nat_per_service.buf.len()
                + self.transactions.len()
                + 40 * (self.declared.len() + stale.len())
                + 4096,
        );
        // Writing into a String cannot fail; results are ignored below.
        out.push_str("*filter\n");
        for c in [KUBE_SERVICES, KUBE_EXTERNAL_SERVICES, KUBE_FORWARD, KUBE_NODEPORTS, KUBE_PROXY_FIREWALL] {
            let _ = writeln!(out, ":{c} - [0:0]");
        }
        out.push_str(&self.filter_services.buf);
        out.push_str(&self.filter_external.buf);
        let forward = [
            format!("-A {KUBE_FORWARD} -m conntrack --ctstate INVALID -j DROP"),
            format!("-A {KUBE_FORWARD} -m comment --comment \"kubernetes forwarding rules\" -m mark --mark {mark}/{mark} -j ACCEPT"),
            format!("-A {KUBE_FORWARD} -m comment --comment \"kubernetes forwarding conntrack rule\" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT"),
        ];
        for rule in &forward {
            out.push_str(rule);
            out.push('\n');
        }
        out.push_str(&self.filter_nodeports.buf);
        out.push_str(&self.filter_firewall.buf);
        out.push_str("COMMIT\n");

        out.push_str(&self.transactions);
        out.push_str("*nat\n");
        for c in [KUBE_SERVICES, KUBE_NODEPORTS, KUBE_POSTROUTING] {
            let _ = writeln!(out, ":{c} - [0:0]");
        }
        if mark_masq_in_last {
            let _ = writeln!(out, ":{KUBE_MARK_MASQ} - [0:0]");
        }
        // Per-service chains of this transaction and stale ones, descending (module docs).
        let mut declared: Vec<&Chain> = self.declared.iter().chain(stale.iter().copied()).collect();
        declared.sort_unstable_by(|a, b| b.cmp(a));
        for c in declared {
            let _ = writeln!(out, ":{c} - [0:0]");
        }
        out.push_str(&self.nat_services.buf);
        out.push_str(&self.nat_nodeports.buf);
        let random_fully = if cfg.random_fully { " --random-fully" } else { "" };
        let fixed_nat = [
            format!("-A {KUBE_POSTROUTING} -m mark ! --mark {mark}/{mark} -j RETURN"),
            format!("-A {KUBE_POSTROUTING} -j MARK --xor-mark {mark}"),
            format!("-A {KUBE_POSTROUTING} -m comment --comment \"kubernetes service traffic requiring SNAT\" -j MASQUERADE{random_fully}"),
            format!("-A {KUBE_MARK_MASQ} -j MARK --or-mark {mark}"),
        ];
        let written_here = if mark_masq_in_last { fixed_nat.len() } else { fixed_nat.len() - 1 };
        for rule in &fixed_nat[..written_here] {
            out.push_str(rule);
            out.push('\n');
        }
        out.push_str(&self.nat_per_service.buf);
        for c in &stale {
            let _ = writeln!(out, "-X {c}");
        }
        out.push_str("COMMIT\n");

        let nat_fixed = self.nat_services.count + self.nat_nodeports.count + fixed_nat.len();
        let nat_rules_written = nat_fixed + self.nat_per_service.written;
        RestoreInput {
            data: out,
            chains_deleted: stale.len(),
            active_chains,
            services_written,
            nat_rules_total: nat_fixed + self.nat_per_service.count,
            nat_rules_written,
            filter_rules: self.filter_services.count
                + self.filter_external.count
                + forward.len()
                + self.filter_nodeports.count
                + self.filter_firewall.count,
            nat_transactions: self.transaction_count + 1,
        }
    }
}

#[cfg(test)]
#[path = "iptables_tests.rs"]
mod tests;

//! `locksmith cluster status|add|remove`: the membership of a native server cluster, through
//! the native client's cluster administration (`NativeBackend::cluster_status`, `add_node`,
//! `remove_node`): changes go to the leader wherever `--backend` starts.

use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};
use locksmith_native::{ClusterError, ClusterStatus, NativeBackend};
use serde_json::json;

use crate::table::{or_dash, print_table};
use crate::{duration_arg, exit};

/// Arguments of `locksmith cluster`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  locksmith cluster status --backend locksmith://10.0.0.1:7531,10.0.0.2:7531,10.0.0.3:7531
  locksmith cluster add 4 10.0.0.4:7531 --cluster-secret-file /etc/locksmith/cluster.secret
                                             # node 4 runs `locksmith serve --node-id 4 --join …`
  locksmith cluster remove 3 --cluster-secret-file /etc/locksmith/cluster.secret

Give --backend every node: a change goes to the leader, which any node names. add and remove
need the nodes' cluster secret (--cluster-secret-file) or, with an auth policy (`serve --auth`),
an admin's token or certificate (exit 77 otherwise); status needs, with a policy, a token or
certificate the policy lists. A server that is not a cluster exits 2; a change that did not
complete in time, or found another one under way, exits 75 (run it again).")]
pub struct ClusterArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: ClusterCommand,
}

/// The `cluster` subcommands.
#[derive(Debug, Subcommand)]
pub enum ClusterCommand {
    /// Show every node: id, address, role, whether it votes and (as the leader sees it) how far
    /// its log is and when it last answered; the term and the leader.
    Status(StatusArgs),
    /// Add a node as a voter: as a learner until it has caught up with the log, then as a voter.
    /// Start it first with `locksmith serve --node-id ID --join`.
    Add(AddArgs),
    /// Remove a node (voter or learner). Removing the leader is allowed: it steps down and the
    /// other voters elect a new one. The last voter cannot be removed.
    Remove(RemoveArgs),
}

/// Where the cluster is, and how to print.
#[derive(Debug, Args)]
pub struct Target {
    /// The cluster: `locksmith://HOST:PORT,HOST:PORT,…` (every node, or any of them), with the
    /// usual TLS and token options.
    #[arg(long, env = "LOCKSMITH_BACKEND", default_value = crate::DEFAULT_BACKEND)]
    pub backend: String,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `locksmith cluster status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// How long to wait for the nodes: every node in --backend is asked at once, and the
    /// answer comes from any that answered within it (the leader's view when it did); the
    /// others are marked "no answer" (exit 69 when none answered).
    #[arg(long, default_value = "3s", value_parser = duration_arg)]
    pub connect_timeout: Duration,
    #[command(flatten)]
    target: Target,
}

/// Arguments of `locksmith cluster add`.
#[derive(Debug, Args)]
pub struct AddArgs {
    /// The new node's id (its `--node-id`).
    pub id: u64,
    /// Its address, `HOST:PORT`, as the other nodes and clients reach it (its `--listen`).
    #[arg(value_parser = node_addr)]
    pub addr: String,
    /// How long the change may take, catching up included; a node that has not caught up by
    /// then stays a learner (run the same command again to promote it).
    #[arg(long, default_value = "60s", value_parser = duration_arg)]
    pub timeout: Duration,
    #[command(flatten)]
    credential: NodeCredential,
    #[command(flatten)]
    target: Target,
}

/// Arguments of `locksmith cluster remove`.
#[derive(Debug, Args)]
pub struct RemoveArgs {
    /// The node's id.
    pub id: u64,
    /// How long the change may take.
    #[arg(long, default_value = "60s", value_parser = duration_arg)]
    pub timeout: Duration,
    #[command(flatten)]
    credential: NodeCredential,
    #[command(flatten)]
    target: Target,
}

/// The node credential of a membership change.
#[derive(Debug, Args)]
pub struct NodeCredential {
    /// Prove the change with the cluster secret (the nodes' --cluster-secret-file): what a
    /// cluster without --auth demands, and what one with --auth accepts instead of an admin's
    /// token or certificate.
    #[arg(long, env = "LOCKSMITH_CLUSTER_SECRET_FILE", value_name = "FILE")]
    pub cluster_secret_file: Option<std::path::PathBuf>,
}

impl NodeCredential {
    /// The secret, read now; exit 78 when it cannot be used.
    fn load(&self, context: &str) -> Result<Option<locksmith_native::ClusterSecret>, ExitCode> {
        let Some(path) = &self.cluster_secret_file else { return Ok(None) };
        locksmith_native::ClusterSecret::load(path).map(Some).map_err(|e| {
            eprintln!("locksmith {context}: --cluster-secret-file: {e}");
            ExitCode::from(exit::CONFIG)
        })
    }
}

/// `HOST:PORT` as the server's `AddNode` checks it, so that a bad address is refused here.
fn node_addr(s: &str) -> Result<String, String> {
    locksmith_server::cluster::check_addr(s).map(|()| s.to_string())
}

/// Runs a `cluster` subcommand.
///
/// # Cancel safety
/// `status` is cancel safe; a dropped `add` or `remove` may still complete on the leader.
pub async fn cluster(args: ClusterArgs) -> ExitCode {
    match args.command {
        ClusterCommand::Status(t) => status(t).await,
        ClusterCommand::Add(a) => add(a).await,
        ClusterCommand::Remove(r) => remove(r).await,
    }
}

fn backend(context: &str, url: &str) -> Result<NativeBackend, ExitCode> {
    NativeBackend::from_url(url).map_err(|e| {
        let e = match e {
            locksmith::Error::InvalidUrl { url, .. } if !url.starts_with("locksmith") => locksmith::Error::InvalidUrl {
                url,
                reason: "cluster commands are for the native server: locksmith://HOST:PORT,… (or locksmiths://)".into(),
            },
            e => e,
        };
        exit::report(context, &e)
    })
}

async fn status(args: StatusArgs) -> ExitCode {
    let t = args.target;
    let b = match backend("cluster status", &t.backend) {
        Ok(b) => b,
        Err(code) => return code,
    };
    match b.cluster_status_within(args.connect_timeout).await {
        Ok(s) if t.json => {
            println!("{}", status_json(&s));
            ExitCode::SUCCESS
        }
        Ok(s) => {
            print_status(&s);
            ExitCode::SUCCESS
        }
        Err(e) => report("cluster status", &e),
    }
}

async fn add(a: AddArgs) -> ExitCode {
    let b = match backend("cluster add", &a.target.backend) {
        Ok(b) => b,
        Err(code) => return code,
    };
    let secret = match a.credential.load("cluster add") {
        Ok(s) => s,
        Err(code) => return code,
    };
    let added = match b.add_node_with(a.id, &a.addr, a.timeout, secret.as_ref()).await {
        Ok(added) => added,
        Err(e) => return report("cluster add", &e),
    };
    if a.target.json {
        let out = json!({ "added": !added.already_voter, "already_voter": added.already_voter, "status": status_json(&added.status) });
        println!("{out}");
        return ExitCode::SUCCESS;
    }
    if added.already_voter {
        println!(
            "node {} is a voter at {} already; nothing changed (a node whose data directory was lost must be \
             removed first, then added back)",
            a.id, a.addr
        );
    } else {
        println!("node {} ({}) added: it caught up with the log and votes", a.id, a.addr);
    }
    print_status(&added.status);
    ExitCode::SUCCESS
}

async fn remove(r: RemoveArgs) -> ExitCode {
    let b = match backend("cluster remove", &r.target.backend) {
        Ok(b) => b,
        Err(code) => return code,
    };
    let secret = match r.credential.load("cluster remove") {
        Ok(s) => s,
        Err(code) => return code,
    };
    let removed = match b.remove_node_with(r.id, r.timeout, secret.as_ref()).await {
        Ok(removed) => removed,
        Err(e) => return report("cluster remove", &e),
    };
    if r.target.json {
        let out = json!({
            "removed": removed.was_member,
            "was_leader": removed.was_leader,
            "status": status_json(&removed.status),
        });
        println!("{out}");
        return ExitCode::SUCCESS;
    }
    if !removed.was_member {
        println!("node {} is not a member; nothing changed", r.id);
    } else if removed.was_leader {
        // Its view is the one of a leader on its way out: no use showing it.
        println!(
            "node {} was the leader and is removed: it steps down, and the other voters elect a new leader (clients \
             follow within a few seconds; see `locksmith cluster status`); it may be stopped now",
            r.id
        );
        return ExitCode::SUCCESS;
    } else {
        println!("node {} removed; it may be stopped now", r.id);
    }
    print_status(&removed.status);
    ExitCode::SUCCESS
}

/// Prints a failure and returns its exit code: not a cluster or a refused change 2, a change
/// that did not complete or could not start now 75, the rest as every command maps library
/// errors (unreachable 69, credentials or permissions 77, TLS configuration 78).
fn report(context: &str, e: &ClusterError) -> ExitCode {
    eprintln!("locksmith {context}: {e}");
    ExitCode::from(code_for(e))
}

fn code_for(e: &ClusterError) -> u8 {
    match e {
        ClusterError::NotACluster { .. } | ClusterError::Refused { .. } => exit::USAGE,
        ClusterError::TimedOut { .. } | ClusterError::Busy { .. } => exit::TEMPFAIL,
        ClusterError::Client(e) => exit::code_for(e),
        _ => 1,
    }
}

fn print_status(s: &ClusterStatus) {
    if s.nodes.is_empty() {
        println!(
            "node {} is no member of a cluster yet: it waits to be added (locksmith cluster add {} HOST:PORT)",
            s.node_id, s.node_id
        );
        return;
    }
    let leader_view = s.is_leader_view();
    let rows: Vec<[String; 7]> = s
        .nodes
        .iter()
        .map(|n| {
            let reach = match (n.unreachable, n.silent) {
                (true, _) => "unreachable",
                (false, true) => "no answer",
                (false, false) if leader_view || n.id == s.node_id => "ok",
                _ => "-",
            };
            let contact = match n.last_contact {
                Some(t) => format!("{} ago", locksmith::format_duration(t)),
                None if leader_view && n.id != s.node_id => "never".into(),
                None => "-".into(),
            };
            [
                n.id.to_string(),
                n.addr.clone(),
                n.role.as_str().to_string(),
                if n.voter { "yes" } else { "no" }.to_string(),
                or_dash(n.matched_index),
                reach.to_string(),
                contact,
            ]
        })
        .collect();
    print_table(&["NODE", "ADDRESS", "ROLE", "VOTER", "MATCHED", "REACHABLE", "LAST CONTACT"], &rows, |i| i == 4);
    let leader = match (s.leader, &s.leader_addr) {
        (Some(id), Some(addr)) => format!("leader: node {id} at {addr}"),
        (Some(id), None) => format!("leader: node {id}"),
        _ => "no leader known (an election may be under way)".into(),
    };
    println!(
        "term {}; {leader}; last log index {}, applied {}{}",
        s.term,
        or_dash(s.last_log_index),
        or_dash(s.applied_index),
        if s.changing { "; a membership change is under way" } else { "" }
    );
    if !s.is_leader_view() {
        println!(
            "(node {}'s view: the leader did not answer through --backend within --connect-timeout, and only the \
             leader knows how far each node's log is and which nodes it cannot reach)",
            s.node_id
        );
    }
}

pub(crate) fn status_json(s: &ClusterStatus) -> serde_json::Value {
    json!({
        "node_id": s.node_id,
        "leader_view": s.is_leader_view(),
        "term": s.term,
        "leader": s.leader,
        "leader_addr": s.leader_addr,
        "last_log_index": s.last_log_index,
        "applied_index": s.applied_index,
        "changing": s.changing,
        "nodes": s.nodes.iter().map(|n| json!({
            "id": n.id,
            "addr": n.addr,
            "role": n.role.as_str(),
            "voter": n.voter,
            "matched_index": n.matched_index,
            "last_contact_ms": n.last_contact.map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX)),
            "unreachable": n.unreachable,
            "no_answer": n.silent,
        })).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A node's address must be HOST:PORT, one node only.
    #[test]
    fn node_addresses_are_host_and_port() {
        assert_eq!(node_addr("10.0.0.4:7531").as_deref(), Ok("10.0.0.4:7531"));
        for bad in ["10.0.0.4", "10.0.0.4:0", ":7531", "a:1,b:2", "h:port"] {
            assert!(node_addr(bad).is_err(), "{bad}");
        }
    }

    /// Refusals exit 2, changes worth retrying 75, and credentials 77 (never "unreachable").
    #[test]
    fn failures_map_to_their_exit_codes() {
        let b = || "locksmith://127.0.0.1:7531".to_string();
        let m = String::new;
        assert_eq!(code_for(&ClusterError::NotACluster { backend: b(), message: m() }), exit::USAGE);
        assert_eq!(code_for(&ClusterError::Refused { backend: b(), message: m() }), exit::USAGE);
        assert_eq!(code_for(&ClusterError::TimedOut { backend: b(), message: m() }), exit::TEMPFAIL);
        assert_eq!(code_for(&ClusterError::Busy { backend: b(), message: m() }), exit::TEMPFAIL);
        let auth = locksmith::Error::Auth { backend: b(), message: "ops may not change".into() };
        assert_eq!(code_for(&ClusterError::Client(auth)), exit::AUTH);
        let down = locksmith::Error::Unavailable { backend: b(), message: "refused".into() };
        assert_eq!(code_for(&ClusterError::Client(down)), exit::UNAVAILABLE);
    }
}

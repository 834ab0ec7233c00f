//! Everything the command started, wherever it went: lockrun is a child
//! subreaper, so what the command orphans (a daemon that called setsid, a
//! double fork) stays in its tree, found in `/proc`, to be stopped before
//! the lock is released. Why, and the costs, in docs/design.md ("Stopping
//! the command").

use std::collections::{HashMap, HashSet};
use std::io;

use nix::errno::Errno;
use nix::sys::wait::{waitid, waitpid, Id, WaitPidFlag};
use nix::unistd::Pid;

/// Makes lockrun the reaper of every orphan the command leaves, for the rest
/// of lockrun's life.
pub(crate) fn adopt_orphans() -> io::Result<()> {
    nix::sys::prctl::set_child_subreaper(true).map_err(io::Error::from)
}

/// Reaps every child of lockrun that has exited, except `leader`, which is
/// tokio's to reap. A leader that exited but is not reaped yet hides the
/// others until it is: they are then reaped on the next call.
pub(crate) fn reap_orphans(leader: Option<Pid>) {
    let peek = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
    loop {
        // ECHILD (no children at all) and "none exited" both end the loop.
        let Some(pid) = waitid(Id::All, peek).ok().and_then(|status| status.pid()) else {
            return;
        };
        if Some(pid) == leader || waitpid(pid, Some(WaitPidFlag::WNOHANG)).is_err() {
            return;
        }
    }
}

/// Whether lockrun has no child process at all, running or exited.
fn has_no_children() -> bool {
    let peek = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
    waitid(Id::All, peek) == Err(Errno::ECHILD)
}

/// A live process below lockrun.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Descendant {
    pub(crate) pid: Pid,
    pub(crate) group: Pid,
}

/// Every live (not zombie) process below lockrun or in the command's
/// `group`, or None when `/proc` cannot tell. The group is searched whatever
/// the ancestry, so that its members are never missed, even were they
/// reparented elsewhere.
pub(crate) fn live(group: Pid) -> Option<Vec<Descendant>> {
    // As subreaper, lockrun is an ancestor of every live descendant through
    // live processes only, so with no child at all there is none: skip the
    // walk through /proc, which costs a read per process on the machine and
    // would otherwise be paid by every run, however simple its command.
    if has_no_children() && nix::sys::signal::killpg(group, None) == Err(Errno::ESRCH) {
        return Some(Vec::new());
    }
    // lockrun's pid as this /proc sees it, which may be another pid
    // namespace's.
    let me: i32 = std::fs::read_link("/proc/self")
        .ok()?
        .to_str()?
        .parse()
        .ok()?;
    let mut processes = Vec::new();
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        // Gone between the listing and the read: nothing left to stop.
        if let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) {
            processes.extend(Stat::parse(pid, &stat));
        }
    }
    Some(live_below(me, group.as_raw(), &processes))
}

/// What lockrun needs from `/proc/PID/stat`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stat {
    pid: i32,
    parent: i32,
    group: i32,
    /// A zombie (or dead) process: exited, waiting for its parent.
    exited: bool,
}

impl Stat {
    fn parse(pid: i32, stat: &str) -> Option<Stat> {
        // The command name is in parentheses and may hold anything, ')' and
        // spaces included: the fields that follow start after the last ')'.
        let (_, rest) = stat.rsplit_once(')')?;
        let mut fields = rest.split_whitespace();
        let state = fields.next()?;
        Some(Stat {
            pid,
            parent: fields.next()?.parse().ok()?,
            group: fields.next()?.parse().ok()?,
            exited: matches!(state, "Z" | "X" | "x"),
        })
    }
}

/// The live processes in the tree below `root`, and those in `group`.
fn live_below(root: i32, group: i32, processes: &[Stat]) -> Vec<Descendant> {
    let mut children: HashMap<i32, Vec<&Stat>> = HashMap::new();
    for process in processes {
        children.entry(process.parent).or_default().push(process);
    }
    let mut below = HashSet::new();
    let mut parents = vec![root];
    while let Some(parent) = parents.pop() {
        for child in children.get(&parent).into_iter().flatten() {
            // A read torn by pid reuse could make a cycle; never loop.
            if child.pid != root && below.insert(child.pid) {
                parents.push(child.pid);
            }
        }
    }
    processes
        .iter()
        .filter(|p| !p.exited && p.pid != root && (below.contains(&p.pid) || p.group == group))
        .map(|p| Descendant {
            pid: Pid::from_raw(p.pid),
            group: Pid::from_raw(p.group),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_follow_the_last_parenthesis() {
        let stat = "4242 (evil) S 1 2 (x) Z 1 1 0) R 17 4242 4242 0 -1 4194560";
        assert_eq!(
            Stat::parse(4242, stat),
            Some(Stat {
                pid: 4242,
                parent: 17,
                group: 4242,
                exited: false,
            })
        );
        assert_eq!(
            Stat::parse(9, "9 (sleep) Z 1 9 9 0"),
            Some(Stat {
                pid: 9,
                parent: 1,
                group: 9,
                exited: true,
            })
        );
        assert_eq!(Stat::parse(9, "9 (sleep"), None);
    }

    #[test]
    fn the_whole_tree_below_counts_and_zombies_do_not() {
        let stat = |pid, parent, group, exited| Stat {
            pid,
            parent,
            group,
            exited,
        };
        let processes = [
            stat(1, 0, 1, false),
            stat(100, 1, 100, false), // lockrun
            stat(101, 100, 101, false),
            stat(102, 101, 101, true),  // an exited child of the command
            stat(103, 102, 101, false), // not yet reparented
            stat(200, 100, 200, false), // a daemon in a session of its own
            stat(201, 200, 200, false),
            stat(300, 1, 300, false), // someone else's
            stat(301, 1, 101, false), // in the command's group, adopted by PID 1
            stat(302, 1, 101, true),
        ];
        let mut pids: Vec<i32> = live_below(100, 101, &processes)
            .iter()
            .map(|d| d.pid.as_raw())
            .collect();
        pids.sort_unstable();
        assert_eq!(pids, [101, 103, 200, 201, 301]);
    }

    #[test]
    fn this_process_is_found_under_its_parent() {
        let me = i32::try_from(std::process::id()).expect("pid fits");
        let parent = nix::unistd::getppid().as_raw();
        let scan = std::fs::read_to_string(format!("/proc/{me}/stat")).expect("own stat");
        let stat = Stat::parse(me, &scan).expect("parses");
        assert_eq!(stat.parent, parent);
        assert!(!stat.exited);
    }
}

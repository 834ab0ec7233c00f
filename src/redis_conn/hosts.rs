//! URLs that name several servers: `redis+sentinel://` and
//! `redis+cluster://`, with `rediss+…` for TLS. The url crate cannot parse a
//! comma-separated host list, so the authority is split here, and each part is
//! handed to the redis crate as an ordinary one-host URL, which decodes the
//! credentials and checks the host the same way as for `redis://`.

use redis::{ConnectionAddr, ConnectionInfo, IntoConnectionInfo, RedisConnectionInfo};

use super::InvalidUrl;

/// Which kind of multi-host URL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Scheme {
    Sentinel,
    Cluster,
}

/// One `HOST[:PORT]` of the list, as written (an IPv6 host keeps its
/// brackets).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Host {
    pub(super) name: String,
    pub(super) port: u16,
}

impl Host {
    /// `host:port` for messages; never holds a password.
    pub(super) fn show(&self) -> String {
        format!("{}:{}", self.name, self.port)
    }
}

/// A parsed `SCHEME://[USER[:PASS]@]HOST[:PORT][,HOST[:PORT]…][/PATH]`.
#[derive(Debug)]
pub(super) struct MultiHost<'a> {
    pub(super) scheme: Scheme,
    pub(super) tls: bool,
    userinfo: Option<&'a str>,
    pub(super) hosts: Vec<Host>,
    /// What follows the host list, without the leading slash.
    pub(super) path: &'a str,
}

impl<'a> MultiHost<'a> {
    /// `None` when `url` is not a multi-host URL at all.
    pub(super) fn parse(url: &'a str) -> Option<Result<Self, InvalidUrl>> {
        let (scheme, rest) = url.split_once("://")?;
        let (scheme, tls, default_port) = match scheme.to_ascii_lowercase().as_str() {
            "redis+sentinel" => (Scheme::Sentinel, false, 26379),
            "rediss+sentinel" => (Scheme::Sentinel, true, 26379),
            "redis+cluster" => (Scheme::Cluster, false, 6379),
            "rediss+cluster" => (Scheme::Cluster, true, 6379),
            _ => return None,
        };
        Some(Self::parse_rest(scheme, tls, default_port, rest))
    }

    fn parse_rest(
        scheme: Scheme,
        tls: bool,
        default_port: u16,
        rest: &'a str,
    ) -> Result<Self, InvalidUrl> {
        // Query options and fragments are not offered: refusing them beats
        // silently ignoring one.
        if rest.contains(['?', '#']) {
            return Err(InvalidUrl);
        }
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        // A password may hold an '@' only percent-encoded, but be lenient:
        // the host list cannot contain one.
        let (userinfo, list) = match authority.rsplit_once('@') {
            Some((userinfo, list)) => (Some(userinfo), list),
            None => (None, authority),
        };
        let hosts = list
            .split(',')
            .map(|text| parse_host(text, default_port))
            .collect::<Result<Vec<_>, _>>()?;
        let parsed = MultiHost {
            scheme,
            tls,
            userinfo,
            hosts,
            path,
        };
        // Each host must make a valid one-host URL; this also checks the
        // credentials decode.
        for host in &parsed.hosts {
            parsed.addr(host)?;
        }
        parsed.redis_settings(0)?;
        Ok(parsed)
    }

    /// The scheme of an ordinary URL to the same kind of server.
    fn plain_scheme(&self) -> &'static str {
        if self.tls {
            "rediss"
        } else {
            "redis"
        }
    }

    /// The address of `host`, TLS or not like the URL.
    pub(super) fn addr(&self, host: &Host) -> Result<ConnectionAddr, InvalidUrl> {
        let url = format!("{}://{}", self.plain_scheme(), host.show());
        let info = url
            .as_str()
            .into_connection_info()
            .map_err(|_| InvalidUrl)?;
        Ok(info.addr().clone())
    }

    /// Every host's address, and the connection settings for the data
    /// nodes (with the first host as a stand-in address).
    pub(super) fn addrs_and_info(
        &self,
        db: i64,
    ) -> Result<(Vec<ConnectionAddr>, ConnectionInfo), InvalidUrl> {
        let addrs = self
            .hosts
            .iter()
            .map(|host| self.addr(host))
            .collect::<Result<Vec<_>, _>>()?;
        let first = addrs.first().cloned().ok_or(InvalidUrl)?;
        let info = first
            .into_connection_info()
            .map_err(|_| InvalidUrl)?
            .set_redis_settings(self.redis_settings(db)?);
        Ok((addrs, info))
    }

    /// The credentials in the URL, and database `db`, for the data nodes.
    pub(super) fn redis_settings(&self, db: i64) -> Result<RedisConnectionInfo, InvalidUrl> {
        let userinfo = self.userinfo.map(|u| format!("{u}@")).unwrap_or_default();
        let url = format!("redis://{userinfo}localhost/{db}");
        let info = url
            .as_str()
            .into_connection_info()
            .map_err(|_| InvalidUrl)?;
        Ok(info.redis_settings().clone())
    }

    /// `scheme://host:port,host:port` without credentials, for messages.
    pub(super) fn show(&self) -> String {
        let scheme = match (self.scheme, self.tls) {
            (Scheme::Sentinel, false) => "redis+sentinel",
            (Scheme::Sentinel, true) => "rediss+sentinel",
            (Scheme::Cluster, false) => "redis+cluster",
            (Scheme::Cluster, true) => "rediss+cluster",
        };
        let hosts: Vec<String> = self.hosts.iter().map(Host::show).collect();
        format!("{scheme}://{}", hosts.join(","))
    }
}

/// Parses `HOST[:PORT]`, with `[V6]` or `[V6]:PORT` for IPv6.
fn parse_host(text: &str, default_port: u16) -> Result<Host, InvalidUrl> {
    let (name, port) = if text.starts_with('[') {
        let end = text.find(']').ok_or(InvalidUrl)?;
        let (name, after) = text.split_at(end + 1);
        match after.strip_prefix(':') {
            Some(port) => (name, Some(port)),
            None if after.is_empty() => (name, None),
            None => return Err(InvalidUrl),
        }
    } else {
        match text.split_once(':') {
            Some((name, port)) => (name, Some(port)),
            None => (text, None),
        }
    };
    if name.is_empty() || name.contains(|c: char| c.is_whitespace()) {
        return Err(InvalidUrl);
    }
    let port = match port {
        Some(port) => port.parse().ok().filter(|&p| p != 0).ok_or(InvalidUrl)?,
        None => default_port,
    };
    Ok(Host {
        name: name.to_owned(),
        port,
    })
}

/// `host:port` of a server a sentinel or cluster named, as a URL authority
/// (an IPv6 address gets brackets).
pub(super) fn authority(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(url: &str) -> Result<MultiHost<'_>, InvalidUrl> {
        MultiHost::parse(url).expect("a multi-host scheme")
    }

    #[test]
    fn host_lists_take_default_ports_and_ipv6() {
        let url = parse("redis+sentinel://u:p@a,b:26380,[::1],[::1]:7/svc/2").expect("valid");
        assert_eq!(url.scheme, Scheme::Sentinel);
        assert!(!url.tls);
        let shown: Vec<String> = url.hosts.iter().map(Host::show).collect();
        assert_eq!(shown, ["a:26379", "b:26380", "[::1]:26379", "[::1]:7"]);
        assert_eq!(url.path, "svc/2");
        let settings = url.redis_settings(2).expect("credentials");
        assert_eq!(settings.username(), Some("u"));
        assert_eq!(settings.password(), Some("p"));
        assert_eq!(settings.db(), 2);
        assert_eq!(
            url.show(),
            "redis+sentinel://a:26379,b:26380,[::1]:26379,[::1]:7"
        );
    }

    #[test]
    fn tls_schemes_give_tls_addresses() {
        let url = parse("rediss+cluster://h1:7000,h2").expect("valid");
        assert!(url.tls);
        assert_eq!(url.hosts[1].port, 6379);
        assert!(matches!(
            url.addr(&url.hosts[0]),
            Ok(ConnectionAddr::TcpTls { .. })
        ));
    }

    #[test]
    fn credentials_are_percent_decoded() {
        let url = parse("redis+cluster://:p%40ss@h:1").expect("valid");
        assert_eq!(url.redis_settings(0).expect("ok").password(), Some("p@ss"));
    }

    #[test]
    fn bad_host_lists_are_refused() {
        for url in [
            "redis+cluster://",
            "redis+cluster://a,,b",
            "redis+cluster://a:0",
            "redis+cluster://a:x",
            "redis+cluster://a:70000",
            "redis+cluster://[::1",
            "redis+cluster://a?x=1",
            "redis+sentinel://a b/svc",
        ] {
            assert!(parse(url).is_err(), "{url}");
        }
        assert!(MultiHost::parse("redis://a").is_none());
    }

    #[test]
    fn authorities_bracket_ipv6() {
        assert_eq!(authority("10.0.0.1", 6379), "10.0.0.1:6379");
        assert_eq!(authority("::1", 6379), "[::1]:6379");
    }
}

//! How host names are looked up: in /etc/hosts and DNS only.
//!
//! lockrun is linked statically (.cargo/config.toml). A static glibc
//! resolves names from files and DNS by itself, but would load any other
//! NSS module /etc/nsswitch.conf names (mDNS, LDAP, myhostname) from the
//! system's glibc, which works only when that is the very version lockrun
//! was built with. So lockrun tells glibc to use files and DNS for host
//! names, in every build, static or not, and the man page says so
//! (REQUIREMENTS).

/// Makes getaddrinfo look host names up in /etc/hosts and DNS only,
/// whatever /etc/nsswitch.conf says, so that no NSS module is ever loaded.
/// Called only when a name may be looked up: it reads /etc/nsswitch.conf,
/// which a run on a unix socket or an IP address need not. Must be called
/// before any other thread exists.
#[cfg(target_env = "gnu")]
pub(crate) fn files_and_dns_only() {
    use std::ffi::{c_char, c_int};
    extern "C" {
        // glibc's <nss.h>, exported by every glibc lockrun builds against.
        fn __nss_configure_lookup(database: *const c_char, service_line: *const c_char) -> c_int;
    }
    // SAFETY: two NUL-terminated constant strings, before any other thread
    // exists or any lookup has been made. glibc fails it only for an unknown
    // database, and "hosts" is one.
    unsafe {
        __nss_configure_lookup(c"hosts".as_ptr(), c"files dns".as_ptr());
    }
}

/// Other C libraries load no NSS modules.
#[cfg(not(target_env = "gnu"))]
pub(crate) fn files_and_dns_only() {}

//! The Lua scripts as lockrun sends them: EVALSHA with a SHA-1 computed at
//! compile time, and EVAL once for a server that does not know the script
//! yet (EVAL caches it under the same hash).
//!
//! `redis::Script` hashes its text whenever one is made, that is at every
//! start of lockrun; with the queue's rules in front of each script, that was
//! a third of the instructions of a whole `lockrun -- true`.

use redis::aio::ConnectionLike;
use redis::{RedisResult, ToRedisArgs, Value};

use crate::redis_conn::Request;

/// A script and its SHA-1, in hex.
pub(crate) struct Lua {
    code: &'static str,
    sha: [u8; 40],
}

impl Lua {
    pub(crate) const fn new(code: &'static str) -> Self {
        Lua {
            code,
            sha: hex(&sha1(code.as_bytes())),
        }
    }

    /// A call of this script, to which keys and arguments are added.
    pub(crate) fn call(&'static self) -> Call {
        Call {
            lua: self,
            keys: Vec::new(),
            args: Vec::new(),
        }
    }
}

/// One call of a script: its KEYS and ARGV.
pub(crate) struct Call {
    lua: &'static Lua,
    keys: Vec<Vec<u8>>,
    args: Vec<Vec<u8>>,
}

impl Call {
    pub(crate) fn key(&mut self, key: impl ToRedisArgs) -> &mut Self {
        key.write_redis_args(&mut self.keys);
        self
    }

    pub(crate) fn arg(&mut self, arg: impl ToRedisArgs) -> &mut Self {
        arg.write_redis_args(&mut self.args);
        self
    }

    /// `EVALSHA sha` or `EVAL code`, then the keys and arguments.
    fn command(&self, name: &str, script: &[u8]) -> redis::Cmd {
        let mut command = redis::cmd(name);
        command
            .arg(script)
            .arg(self.keys.len())
            .arg(&self.keys)
            .arg(&self.args);
        command
    }
}

impl Request for Call {
    async fn send(&self, conn: &mut impl ConnectionLike) -> RedisResult<Value> {
        match self
            .command("EVALSHA", &self.lua.sha)
            .query_async(conn)
            .await
        {
            Err(err)
                if err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) =>
            {
                self.command("EVAL", self.lua.code.as_bytes())
                    .query_async(conn)
                    .await
            }
            done => done,
        }
    }
}

/// SHA-1 (FIPS 180-4), in a form the compiler can evaluate.
// The standard's own names, so that the two can be read side by side.
#[allow(clippy::many_single_char_names)]
const fn sha1(data: &[u8]) -> [u8; 20] {
    let blocks = (data.len() + 8) / 64 + 1;
    let mut h: [u32; 5] = [
        0x6745_2301,
        0xEFCD_AB89,
        0x98BA_DCFE,
        0x1032_5476,
        0xC3D2_E1F0,
    ];
    let mut block = 0;
    while block < blocks {
        let mut w = [0u32; 80];
        let mut t = 0;
        while t < 16 {
            let at = block * 64 + t * 4;
            w[t] = u32::from_be_bytes([
                padded(data, at),
                padded(data, at + 1),
                padded(data, at + 2),
                padded(data, at + 3),
            ]);
            t += 1;
        }
        while t < 80 {
            w[t] = (w[t - 3] ^ w[t - 8] ^ w[t - 14] ^ w[t - 16]).rotate_left(1);
            t += 1;
        }
        let [mut a, mut b, mut c, mut d, mut e] = h;
        t = 0;
        while t < 80 {
            let (f, k) = if t < 20 {
                ((b & c) | (!b & d), 0x5A82_7999)
            } else if t < 40 {
                (b ^ c ^ d, 0x6ED9_EBA1)
            } else if t < 60 {
                ((b & c) | (b & d) | (c & d), 0x8F1B_BCDC)
            } else {
                (b ^ c ^ d, 0xCA62_C1D6)
            };
            let next = a
                .rotate_left(5)
                .wrapping_add(f)
                .wrapping_add(e)
                .wrapping_add(k)
                .wrapping_add(w[t]);
            e = d;
            d = c;
            c = b.rotate_left(30);
            b = a;
            a = next;
            t += 1;
        }
        h = [
            h[0].wrapping_add(a),
            h[1].wrapping_add(b),
            h[2].wrapping_add(c),
            h[3].wrapping_add(d),
            h[4].wrapping_add(e),
        ];
        block += 1;
    }
    let mut digest = [0u8; 20];
    let mut i = 0;
    while i < 20 {
        digest[i] = h[i / 4].to_be_bytes()[i % 4];
        i += 1;
    }
    digest
}

/// Byte `i` of `data` padded as SHA-1 wants: the message, a 1 bit, zeros,
/// and its length in bits, filling whole 64-byte blocks.
const fn padded(data: &[u8], i: usize) -> u8 {
    let end = ((data.len() + 8) / 64 + 1) * 64;
    if i < data.len() {
        data[i]
    } else if i == data.len() {
        0x80
    } else if i >= end - 8 {
        ((data.len() as u64) * 8).to_be_bytes()[i - (end - 8)]
    } else {
        0
    }
}

/// Lower-case hex, as Redis names scripts.
const fn hex(digest: &[u8; 20]) -> [u8; 40] {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut text = [0u8; 40];
    let mut i = 0;
    while i < 20 {
        text[2 * i] = DIGITS[(digest[i] >> 4) as usize];
        text[2 * i + 1] = DIGITS[(digest[i] & 0xf) as usize];
        i += 1;
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sha1_hex(data: &[u8]) -> String {
        String::from_utf8(hex(&sha1(data)).to_vec()).expect("hex is ASCII")
    }

    #[test]
    fn sha1_matches_the_standard_vectors() {
        assert_eq!(sha1_hex(b""), "da39a3ee5e6b4b0d3255bfef95601890afd80709");
        assert_eq!(sha1_hex(b"abc"), "a9993e364706816aba3e25717850c26c9cd0d89d");
        // 56 bytes: the length no longer fits in the first block.
        assert_eq!(
            sha1_hex(b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "84983e441c3bd26ebaae4aa1f95129e5e54670f1"
        );
        assert_eq!(
            sha1_hex(&vec![b'a'; 1_000_000]),
            "34aa973cd4c4daa4f61eeb2bdbad27316534016f"
        );
    }

    #[test]
    fn hashes_are_the_ones_redis_computes() {
        for code in [
            "return 1",
            include_str!("guard.lua"),
            include_str!("queue.lua"),
            include_str!("renew.lua"),
        ] {
            let lua = Lua::new(code);
            assert_eq!(
                std::str::from_utf8(&lua.sha).expect("hex"),
                redis::Script::new(code).get_hash()
            );
        }
    }
}

// Temporary until build.rs assembles the scripts.
macro_rules! queue_script {
    ($($file:literal),+) => {
        Lua::new(concat!(include_str!("guard.lua"), include_str!("queue.lua"), $(include_str!($file)),+))
    };
}
pub(crate) static ACQUIRE: Lua = queue_script!("acquire.lua");
pub(crate) static RENEW: Lua = Lua::new(include_str!("renew.lua"));
pub(crate) static RELEASE: Lua = queue_script!("release.lua");
pub(crate) static FORCE_RELEASE: Lua = queue_script!("force_release.lua");
pub(crate) static STATUS: Lua = queue_script!("status.lua");
pub(crate) static VOTE: Lua = queue_script!("fresh.lua", "acquire.lua");
pub(crate) static RAISE_FENCE: Lua = queue_script!("raise_fence.lua");

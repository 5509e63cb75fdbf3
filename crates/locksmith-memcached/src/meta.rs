//! The four meta commands a lock needs, as bytes, and the first line of their answers parsed.
//! Pure: no I/O, so every answer the server can give is checked by a unit test.

use base64::Engine as _;

/// What a command's answer says, once complete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reply {
    /// `HD`: stored, or deleted.
    Done,
    /// `NS`: not stored (an add found the key taken).
    NotStored,
    /// `EX`: the CAS did not match (the item changed since it was read).
    Exists,
    /// `NF` / `EN`: no such item.
    Missing,
    /// `VA`: the item, with the CAS and seconds left asked for (`-1`: no expiry).
    Value { data: Vec<u8>, cas: u64, ttl: i64 },
}

/// The first line of an answer: complete, or `VA <len>` with a data block to read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Head {
    Complete(Reply),
    Value { len: usize, cas: u64, ttl: i64 },
}

/// An answer that is not a result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The server refused the command (`ERROR`, `CLIENT_ERROR …`, `SERVER_ERROR …`): the
    /// connection is still in step.
    Server(String),
    /// Not the meta protocol as we know it: the connection cannot be trusted any more.
    Garbled(String),
}

/// Longest data block accepted: memcached's default item size limit. A bigger block is not a
/// lock value, and reading it would let a wrong server make us allocate without bound.
pub(crate) const MAX_VALUE: usize = 1024 * 1024;

/// The key as sent, and the flag that says how: plain, or base64 (`b`) when it has a space,
/// which the text protocol cannot carry. The server stores the same bytes either way.
fn key_token(key: &str) -> (String, &'static str) {
    if key.bytes().any(|b| b.is_ascii_whitespace()) {
        (base64::engine::general_purpose::STANDARD.encode(key), " b")
    } else {
        (key.to_string(), "")
    }
}

fn set(key: &str, value: &[u8], flags: &str) -> Vec<u8> {
    let (k, b) = key_token(key);
    let mut out = format!("ms {k} {} {flags}{b}\r\n", value.len()).into_bytes();
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
    out
}

/// `ms KEY LEN T<secs> ME`: store only if absent (mode add), expiring after `secs`.
pub(crate) fn add(key: &str, value: &[u8], secs: u64) -> Vec<u8> {
    set(key, value, &format!("T{secs} ME"))
}

/// `ms KEY LEN T<secs> C<cas>`: overwrite only if the item still has `cas`.
pub(crate) fn replace_if(key: &str, value: &[u8], secs: u64, cas: u64) -> Vec<u8> {
    set(key, value, &format!("T{secs} C{cas}"))
}

/// `mg KEY v c t`: value, CAS and seconds left.
pub(crate) fn read(key: &str) -> Vec<u8> {
    let (k, b) = key_token(key);
    format!("mg {k} v c t{b}\r\n").into_bytes()
}

/// `md KEY C<cas>`: delete only if the item still has `cas`.
pub(crate) fn delete_if(key: &str, cas: u64) -> Vec<u8> {
    let (k, b) = key_token(key);
    format!("md {k} C{cas}{b}\r\n").into_bytes()
}

/// Parses the first line of an answer (without its `\r\n`).
pub(crate) fn parse_head(line: &str) -> Result<Head, Refusal> {
    let mut words = line.split(' ');
    let code = words.next().unwrap_or_default();
    let done = |r| Ok(Head::Complete(r));
    match code {
        "HD" => done(Reply::Done),
        "NS" => done(Reply::NotStored),
        "EX" => done(Reply::Exists),
        "NF" | "EN" => done(Reply::Missing),
        "VA" => {
            let len = words.next().and_then(|w| w.parse::<usize>().ok());
            let Some(len) = len.filter(|l| *l <= MAX_VALUE) else {
                return Err(Refusal::Garbled(format!("unexpected answer {line:?} (a value over {MAX_VALUE} bytes?)")));
            };
            let (mut cas, mut ttl) = (None, None);
            for w in words {
                match w.split_at_checked(1) {
                    Some(("c", n)) => cas = n.parse().ok(),
                    Some(("t", n)) => ttl = n.parse().ok(),
                    _ => {}
                }
            }
            match (cas, ttl) {
                (Some(cas), Some(ttl)) => Ok(Head::Value { len, cas, ttl }),
                _ => Err(Refusal::Garbled(format!("answer {line:?} lacks the CAS or TTL asked for"))),
            }
        }
        "ERROR" => {
            Err(Refusal::Server("ERROR (the server does not know the meta commands: memcached ≥ 1.6 needed)".into()))
        }
        "CLIENT_ERROR" | "SERVER_ERROR" => Err(Refusal::Server(line.to_string())),
        _ => Err(Refusal::Garbled(format!("unexpected answer {line:?}: not a memcached meta protocol server?"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_written_as_memcached_reads_them() {
        assert_eq!(add("locks:a", b"v1", 3), b"ms locks:a 2 T3 ME\r\nv1\r\n");
        assert_eq!(replace_if("a", b"v1", 2, 17), b"ms a 2 T2 C17\r\nv1\r\n");
        assert_eq!(read("a"), b"mg a v c t\r\n");
        assert_eq!(delete_if("a", 9), b"md a C9\r\n");
        // A space cannot travel in a text key: base64 with the `b` flag.
        assert_eq!(read("hello world"), b"mg aGVsbG8gd29ybGQ= v c t b\r\n");
        assert_eq!(delete_if("a b", 1), b"md YSBi C1 b\r\n");
    }

    #[test]
    fn every_answer_is_understood() {
        assert_eq!(parse_head("HD"), Ok(Head::Complete(Reply::Done)));
        assert_eq!(parse_head("HD c12"), Ok(Head::Complete(Reply::Done)));
        assert_eq!(parse_head("NS"), Ok(Head::Complete(Reply::NotStored)));
        assert_eq!(parse_head("EX"), Ok(Head::Complete(Reply::Exists)));
        assert_eq!(parse_head("NF"), Ok(Head::Complete(Reply::Missing)));
        assert_eq!(parse_head("EN"), Ok(Head::Complete(Reply::Missing)));
        assert_eq!(parse_head("VA 3 c1 t2"), Ok(Head::Value { len: 3, cas: 1, ttl: 2 }));
        assert_eq!(parse_head("VA 3 t-1 c5"), Ok(Head::Value { len: 3, cas: 5, ttl: -1 }));
        assert!(parse_head("VA 3 c1").is_err());
        assert!(parse_head("VA 99999999 c1 t1").is_err());
        assert!(matches!(parse_head("ERROR"), Err(Refusal::Server(m)) if m.contains("1.6")));
        assert_eq!(parse_head("SERVER_ERROR out of memory"), Err(Refusal::Server("SERVER_ERROR out of memory".into())));
        assert!(matches!(parse_head("+OK"), Err(Refusal::Garbled(m)) if m.contains("not a memcached")));
    }
}

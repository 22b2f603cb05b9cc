//! Kernel TLS through a real client: kcat over an SSL listener with a client certificate.
//! Where the kernel offers the `tls` ULP, a consumer reads ~10 MB and strace shows the
//! broker sendfile-ing it to the TLS socket; everywhere, the start log says which path TLS
//! takes and why, and the metrics count the connections on that path.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::pki::Pki;
use common::{Broker, free_ports, have};

struct Ssl {
    _dir: tempfile::TempDir,
    broker: Broker,
    pki: Pki,
    ssl: SocketAddr,
    metrics: SocketAddr,
}

/// A broker with an SSL listener (client certificates required); `extra`: more flags.
fn start(extra: &[&str]) -> Ssl {
    let cores = 1;
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(&dir.path().join("pki"));
    pki.client("alice", "alice");
    let ssl = SocketAddr::from(([127, 0, 0, 1], free_ports(cores as u16 + 1)));
    let metrics = SocketAddr::from(([127, 0, 0, 1], free_ports(0)));
    let (listener, metrics_arg) = (format!("MTLS=SSL://{ssl}"), metrics.to_string());
    let (cert, key, ca) = (
        pki.path("broker.pem"),
        pki.path("broker.key"),
        pki.path("ca.pem"),
    );
    let mut args = vec![
        "--fsync",
        "never",
        "--listener",
        &listener,
        "--tls-cert",
        &cert,
        "--tls-key",
        &key,
        "--tls-client-ca",
        &ca,
        "--metrics-listen",
        &metrics_arg,
    ];
    args.extend(extra);
    let broker = Broker::start_in(&dir.path().join("data"), cores, &args);
    Ssl {
        _dir: dir,
        broker,
        pki,
        ssl,
        metrics,
    }
}

impl Ssl {
    /// kcat `args` over the SSL listener as alice; `stdin` is what it produces.
    fn kcat(&self, args: &[&str], stdin: &[u8]) -> Output {
        let mut child = Command::new("timeout")
            .args(["120", "kcat", "-b", &self.ssl.to_string()])
            .args(args)
            .args(["-X", "security.protocol=SSL"])
            .arg("-X")
            .arg(format!("ssl.ca.location={}", self.pki.path("ca.pem")))
            .arg("-X")
            .arg(format!(
                "ssl.certificate.location={}",
                self.pki.path("alice.pem")
            ))
            .arg("-X")
            .arg(format!("ssl.key.location={}", self.pki.path("alice.key")))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(stdin).unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "kcat {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    /// Produces `lines` to `topic` and reads them back; returns what was read, sorted.
    fn round_trip(&self, topic: &str, lines: &[String]) -> Vec<String> {
        let input = lines.join("\n") + "\n";
        self.kcat(&["-P", "-t", topic], input.as_bytes());
        let out = self.kcat(&["-C", "-e", "-q", "-t", topic], b"");
        let mut read: Vec<String> = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(String::from)
            .collect();
        read.sort();
        read
    }

    /// The sum over cores of the counter `name`.
    fn counter(&self, name: &str) -> u64 {
        let mut stream = TcpStream::connect(self.metrics).unwrap();
        stream
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: pagurus\r\nConnection: close\r\n\r\n")
            .unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut page = String::new();
        stream.read_to_string(&mut page).unwrap();
        page.lines()
            .filter(|line| line.starts_with(&format!("{name}{{")))
            .filter_map(|line| line.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    }
}

fn lines(count: usize, bytes: usize) -> Vec<String> {
    (0..count)
        .map(|i| {
            let mut line = format!("{i:08}-");
            while line.len() < bytes {
                line.push(char::from(b'a' + (line.len() + i) as u8 % 26));
            }
            line
        })
        .collect()
}

fn ulp_available() -> bool {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_ulp")
        .is_ok_and(|list| list.split_whitespace().any(|ulp| ulp == "tls"))
}

#[test]
fn ktls_off_keeps_tls_in_user_space_and_says_so() {
    let s = start(&["--ktls", "off"]);
    let log = s.broker.log_text();
    assert!(log.contains("kernel TLS off (--ktls off)"), "{log}");
    if !have("kcat", "kcat", &["-V"]) {
        return;
    }
    let expected = lines(20, 100);
    assert_eq!(s.round_trip("off", &expected), expected);
    assert!(s.counter("pagurus_tls_connections_userspace_total") >= 2);
    assert_eq!(s.counter("pagurus_tls_connections_kernel_total"), 0);
    assert_eq!(s.counter("pagurus_tls_kernel_fallbacks_total"), 0);
}

#[test]
fn fetches_over_ssl_use_sendfile_in_kernel_tls() {
    let s = start(&[]);
    let log = s.broker.log_text();
    if !ulp_available() {
        // Here the path is user space, and the start line says why.
        assert!(
            log.contains("kernel TLS unavailable") && log.contains("tcp_available_ulp"),
            "{log}"
        );
        assert!(!log.contains("moves into kernel TLS"), "{log}");
        // Without the ULP no connection tries the kernel: none falls back, none fails.
        if have("kcat", "kcat", &["-V"]) {
            let expected = lines(20, 100);
            assert_eq!(s.round_trip("auto", &expected), expected);
            assert!(s.counter("pagurus_tls_connections_userspace_total") >= 2);
            assert_eq!(s.counter("pagurus_tls_kernel_fallbacks_total"), 0);
            assert_eq!(s.counter("pagurus_tls_connections_kernel_total"), 0);
        }
        eprintln!(
            "SKIPPED the kernel TLS part: the kernel offers no tls ULP (/proc/sys/net/ipv4/tcp_available_ulp; modprobe tls)"
        );
        return;
    }
    assert!(log.contains("moves into kernel TLS"), "{log}");
    if !have("kcat", "kcat", &["-V"]) {
        return;
    }
    // ~10 MB in 5000 messages.
    let expected = lines(5000, 2000);
    let input = expected.join("\n") + "\n";
    s.kcat(&["-P", "-t", "big"], input.as_bytes());
    let strace = Strace::attach(s.broker.pid());
    let out = s.kcat(&["-C", "-e", "-q", "-t", "big"], b"");
    let sent = strace.map(Strace::sendfile_bytes);
    let mut read: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    read.sort();
    assert!(read == expected, "the bytes read back differ");
    assert!(s.counter("pagurus_tls_connections_kernel_total") >= 2);
    assert_eq!(s.counter("pagurus_tls_kernel_failed_total"), 0);
    match sent {
        // While strace watched, only kcat's TLS connection fetched: the broker's sendfile
        // calls wrote its bytes to that socket, which the kernel encrypted.
        Some(sent) => assert!(sent >= 10_000_000, "sendfile sent only {sent} bytes"),
        None => eprintln!("strace cannot attach here; the metric alone showed kernel TLS"),
    }
}

/// `strace -f -e trace=sendfile -p PID`, started by the test.
struct Strace {
    child: Child,
    out: tempfile::NamedTempFile,
}

impl Strace {
    /// Attaches to every thread of `pid`; `None` when strace is missing or may not trace.
    fn attach(pid: i32) -> Option<Strace> {
        let out = tempfile::NamedTempFile::new().unwrap();
        let err = tempfile::NamedTempFile::new().unwrap();
        let child = Command::new("strace")
            .args(["-f", "-e", "trace=sendfile", "-o"])
            .arg(out.path())
            .args(["-p", &pid.to_string()])
            .stderr(err.reopen().unwrap())
            .spawn()
            .ok()?;
        let mut strace = Strace { child, out };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let said = std::fs::read_to_string(err.path()).unwrap_or_default();
            if said.contains("attached") {
                return Some(strace);
            }
            if strace.child.try_wait().unwrap().is_some() || Instant::now() > deadline {
                eprintln!("strace: {said}");
                let _ = strace.child.kill();
                let _ = strace.child.wait();
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stops strace (which detaches) and sums what the traced sendfile calls returned.
    fn sendfile_bytes(mut self) -> u64 {
        // SAFETY: a plain kill(2) of the strace this test started.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
        let trace = std::fs::read_to_string(self.out.path()).unwrap();
        trace
            .lines()
            .filter(|line| line.contains("sendfile"))
            .filter_map(|line| line.rsplit("= ").next()?.trim().parse::<u64>().ok())
            .sum()
    }
}

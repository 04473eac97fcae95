//! `duality http --nginx-config FILE`: the configuration of an nginx that
//! serves static files, read as `duality http`'s flags, so a site moves
//! over without writing its command line by hand.
//!
//! One `server` (in `http`, or alone), its directives and those of the
//! `http` and main contexts around it, as nginx inherits them (an array
//! directive — `index`, `add_header`, `error_page`, `allow`/`deny` — at an
//! inner level replaces the outer level's, as nginx's merge does).
//! `location` blocks are taken where they are an idiom a flag stands for:
//! `location /` (its directives are the server's, but where other
//! locations set their own: then those set by path are its own
//! `--location /`), `location /P/ { alias D; }` or `{ root R; }`
//! (`--alias`), `location ~ /\. { deny all; }` (`--dotfiles deny`),
//! `location = /P { stub_status; }` (`--stub-status`); any prefix, `^~`,
//! exact or regular-expression location of the directives set by path
//! (`try_files`, `error_page`, `gzip…`, `allow`/`deny`, `auth_basic`, `return`, `expires`,
//! `add_header`, `limit_rate`, `access_log off`, `internal`: a
//! `--location` group), `location = /50x.html { root R; }`
//! with the server's root; `if ($invalid_referer) { return 403; }` beside
//! `valid_referers`, and `secure_link` with `secure_link_md5` and its two
//! `if`s (403, 410), in the server or one prefix location. Tuning
//! with no counterpart here (`sendfile`, `tcp_nopush`, `error_log`…) is
//! accepted and listed, so the start-up line says what was left out;
//! anything else (`proxy_pass`, TLS, other locations, `map`…) is refused
//! with its file and line: a configuration is never half read in silence.
//! A server without `listen` keeps duality's default address (nginx's is
//! `*:80`), and one without `root` needs `--root`.
//!
//! [`parse`] reads nginx's syntax (pure); [`translate`] maps directives.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// One directive: its name, arguments (quotes and escapes resolved) and
/// block, where it stood.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Directive {
    /// Its name.
    pub name: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Its `{ … }`, if it has one.
    pub block: Option<Vec<Directive>>,
    /// The line it starts on (1-based).
    pub line: usize,
}

/// Reads nginx's configuration syntax: words separated by blanks, `;`
/// ending a directive, `{ … }` a block, `#` a comment to the end of the
/// line, `"…"` and `'…'` quoting (with `\"`, `\'`, `\\`, `\n`, `\t`,
/// `\r` escapes, as nginx reads them). `Err`: the line and what is wrong.
pub fn parse(text: &str) -> Result<Vec<Directive>, (usize, String)> {
    let mut p = Parser {
        chars: text.chars().collect(),
        at: 0,
        line: 1,
        token_line: 1,
        depth: 0,
    };
    let list = p.block(false)?;
    Ok(list)
}

struct Parser {
    chars: Vec<char>,
    at: usize,
    line: usize,
    /// Where the last token began.
    token_line: usize,
    /// Blocks open around the parser.
    depth: usize,
}

/// Blocks nested deeper than this are refused.
const MAX_NESTING: usize = 64;

enum Token {
    Word(String),
    Semicolon,
    Open,
    Close,
    End,
}

impl Parser {
    fn block(&mut self, inner: bool) -> Result<Vec<Directive>, (usize, String)> {
        let mut list = Vec::new();
        let mut words: Vec<String> = Vec::new();
        let mut start = self.line;
        loop {
            let (token, line) = self.token()?;
            match token {
                Token::Word(w) => {
                    if words.is_empty() {
                        start = line;
                    }
                    words.push(w);
                }
                Token::Semicolon | Token::Open if words.is_empty() => {
                    return Err((line, "a directive without a name".into()));
                }
                Token::Semicolon => {
                    let name = words.remove(0);
                    list.push(Directive {
                        name,
                        args: std::mem::take(&mut words),
                        block: None,
                        line: start,
                    });
                }
                Token::Open => {
                    let name = words.remove(0);
                    let args = std::mem::take(&mut words);
                    // Deeper than any configuration nests: refused, not a
                    // stack overflow.
                    self.depth += 1;
                    if self.depth > MAX_NESTING {
                        return Err((line, format!("blocks nest more than {MAX_NESTING} deep")));
                    }
                    let block = self.block(true)?;
                    self.depth -= 1;
                    list.push(Directive {
                        name,
                        args,
                        block: Some(block),
                        line: start,
                    });
                }
                Token::Close if inner && words.is_empty() => return Ok(list),
                Token::Close if !words.is_empty() => {
                    return Err((line, format!("\"{}\" is not ended with \";\"", words[0])));
                }
                Token::Close => return Err((line, "unexpected \"}\"".into())),
                Token::End if !words.is_empty() => {
                    return Err((line, format!("\"{}\" is not ended with \";\"", words[0])));
                }
                Token::End if inner => {
                    return Err((line, "a block is not closed with \"}\"".into()))
                }
                Token::End => return Ok(list),
            }
        }
    }

    /// The next token and the line it starts on.
    fn token(&mut self) -> Result<(Token, usize), (usize, String)> {
        let t = self.next_token()?;
        Ok((t, self.token_line))
    }

    fn next_token(&mut self) -> Result<Token, (usize, String)> {
        // Blanks and comments.
        loop {
            match self.chars.get(self.at) {
                Some('\n') => {
                    self.line += 1;
                    self.at += 1;
                }
                Some(c) if c.is_whitespace() => self.at += 1,
                Some('#') => {
                    while self.chars.get(self.at).is_some_and(|&c| c != '\n') {
                        self.at += 1;
                    }
                }
                _ => break,
            }
        }
        self.token_line = self.line;
        let Some(&c) = self.chars.get(self.at) else {
            return Ok(Token::End);
        };
        match c {
            ';' => {
                self.at += 1;
                return Ok(Token::Semicolon);
            }
            '{' => {
                self.at += 1;
                return Ok(Token::Open);
            }
            '}' => {
                self.at += 1;
                return Ok(Token::Close);
            }
            _ => {}
        }
        let mut word = String::new();
        if c == '"' || c == '\'' {
            let start = self.line;
            self.at += 1;
            loop {
                let Some(&ch) = self.chars.get(self.at) else {
                    return Err((start, format!("a {c}quoted{c} string is not closed")));
                };
                self.at += 1;
                match ch {
                    '\\' => {
                        let next = self.chars.get(self.at).copied();
                        self.at += 1;
                        match next {
                            Some('"') => word.push('"'),
                            Some('\'') => word.push('\''),
                            Some('\\') => word.push('\\'),
                            Some('n') => word.push('\n'),
                            Some('t') => word.push('\t'),
                            Some('r') => word.push('\r'),
                            Some(other) => {
                                if other == '\n' {
                                    self.line += 1;
                                }
                                word.push('\\');
                                word.push(other);
                            }
                            None => return Err((start, "a quoted string is not closed".into())),
                        }
                    }
                    '\n' => {
                        self.line += 1;
                        word.push('\n');
                    }
                    q if q == c => break,
                    other => word.push(other),
                }
            }
            // nginx wants a separator after a quoted word.
            if let Some(&n) = self.chars.get(self.at) {
                if !(n.is_whitespace() || n == ';' || n == '{' || n == '}' || n == ')') {
                    return Err((
                        self.line,
                        format!("unexpected \"{n}\" after a quoted string"),
                    ));
                }
            }
            return Ok(Token::Word(word));
        }
        while let Some(&ch) = self.chars.get(self.at) {
            // `{` ends a word, but for a variable's `${`.
            if ch.is_whitespace() || ch == ';' || (ch == '{' && !word.ends_with('$')) {
                break;
            }
            // `}` ends a word only where it does not close `${…}`.
            let open_variable = match (word.rfind("${"), word.rfind('}')) {
                (Some(o), Some(c)) => o > c,
                (o, _) => o.is_some(),
            };
            if ch == '}' && !open_variable {
                break;
            }
            if ch == '\\' {
                if let Some(&next) = self.chars.get(self.at + 1) {
                    word.push(ch);
                    word.push(next);
                    self.at += 2;
                    continue;
                }
            }
            word.push(ch);
            self.at += 1;
        }
        Ok(Token::Word(word))
    }
}

/// What a configuration came to.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Translated {
    /// `duality http`'s arguments.
    pub args: Vec<String>,
    /// Directives accepted without effect, with where they were.
    pub ignored: Vec<String>,
}

/// `duality http … --nginx-config FILE …` with FILE's flags put right
/// after `http` (so the flags given after them win); any other command
/// line as it is. A configuration that cannot be translated ends the
/// process with its error.
pub fn expand_args(mut argv: Vec<std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    if argv.get(1).is_none_or(|a| a != "http") {
        return argv;
    }
    let mut file = None;
    for (i, a) in argv.iter().enumerate().skip(2) {
        let a = a.to_string_lossy();
        if a == "--" {
            break;
        }
        if let Some(f) = a.strip_prefix("--nginx-config=") {
            file = Some(PathBuf::from(f));
        } else if a == "--nginx-config" {
            file = argv.get(i + 1).map(PathBuf::from);
        }
    }
    let Some(file) = file else {
        return argv;
    };
    match translate_file(&file) {
        Ok(t) => {
            // The secret of secure_link_md5 stays out of logs.
            let mut shown: Vec<String> = t.args.iter().map(|a| shell_word(a)).collect();
            for i in 1..shown.len() {
                match shown[i - 1].as_str() {
                    "--secure-link-md5" => shown[i] = "'(from the file)'".into(),
                    // A group's words are quoted already, as typed.
                    "--location" => shown[i] = t.args[i].clone(),
                    _ => {}
                }
            }
            duality_rt::say!(
                "duality http: from {}: {}{}",
                file.display(),
                shown.join(" "),
                match t.ignored.is_empty() {
                    true => String::new(),
                    false => format!("; without effect here: {}", t.ignored.join(", ")),
                }
            );
            argv.splice(2..2, t.args.into_iter().map(Into::into));
            argv
        }
        Err(e) => {
            duality_rt::say!("duality: --nginx-config: {e}");
            std::process::exit(1);
        }
    }
}

/// `word` as a shell reads it back.
fn shell_word(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./:=@,+%".contains(&b));
    match plain {
        true => word.to_string(),
        false => format!("'{}'", word.replace('\'', "'\\''")),
    }
}

/// Reads and translates `path` (see the [module](self)).
pub fn translate_file(path: &Path) -> Result<Translated, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("{}: cannot read it: {e}", path.display()))?;
    let dir = path.parent().unwrap_or(Path::new("."));
    translate(&text, &path.display().to_string(), dir)
}

/// Translates a configuration's `text` (`name`: its file, for messages;
/// `dir`: where relative `include`s are found).
pub fn translate(text: &str, name: &str, dir: &Path) -> Result<Translated, String> {
    let list = parse(text).map_err(|(line, e)| format!("{name}:{line}: {e}"))?;
    let mut t = State {
        dir: dir.to_path_buf(),
        ..State::default()
    };
    t.context(&list, Level::Main, name)?;
    t.finish(name)
}

/// Where a directive stands; deeper levels replace arrays of outer ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Level {
    Main,
    Http,
    Server,
    Location,
}

#[derive(Default)]
struct State {
    dir: PathBuf,
    /// Flags with one value, in the order met (a later one wins).
    single: Vec<(String, String)>,
    /// Array directives: flag, value, level.
    arrays: Vec<(&'static str, String, Level)>,
    ignored: Vec<String>,
    log_formats: HashMap<String, (String, String)>,
    access_log: Option<(String, String, usize)>,
    req_zones: HashMap<String, (String, String)>,
    limit_req: Vec<(String, Vec<String>, usize)>,
    limit_req_status: Option<String>,
    conn_zones: HashMap<String, String>,
    limit_conn: Option<(String, String, usize)>,
    limit_conn_status: Option<String>,
    workers: Option<u64>,
    worker_connections: Option<u64>,
    servers: usize,
    referers: Option<String>,
    referer_if: bool,
    /// Includes being read, nested.
    depth: usize,
    /// The location holding `secure_link`, if one does.
    secure_prefix: Option<String>,
    /// secure_link's two ifs: the 403 and the 410.
    secure_ifs: [bool; 2],
    /// `location = PATH { root R; }`: PATH, R, its file and line (R must
    /// be the server's root).
    same_root: Vec<(String, String, String)>,
    /// Locations with settings of their own (`--location`): what they
    /// take (`/a/`, `=/a`), their directives, where.
    groups: Vec<(String, Vec<Directive>, String)>,
    /// `location /`'s directives of the kinds a `--location` takes: the
    /// server's unless other locations set their own (then `/`'s group).
    root_scoped: Vec<Directive>,
    /// `location /`'s other directives, where (nginx applies them there
    /// alone; translated, they are the server's).
    root_other: Vec<String>,
    /// Prefix locations of an alias, root, secure_link or listings alone,
    /// where: an empty `--location` where others have settings (they
    /// have the server's, not `location /`'s).
    plain_prefixes: Vec<(String, String)>,
    /// `^~` prefixes.
    only_prefixes: Vec<String>,
}

/// Directives a `--location` group takes (nginx's that are set by path).
const SCOPED: &[&str] = &[
    "try_files",
    "error_page",
    "gzip",
    "gzip_static",
    "gzip_types",
    "gzip_min_length",
    "allow",
    "deny",
    "auth_basic",
    "auth_basic_user_file",
    "satisfy",
    "return",
    "expires",
    "add_header",
    "limit_rate",
    "limit_rate_after",
];

/// nginx's defaults where duality's differ: absolute redirects, its ETag
/// format, a 75 s keep-alive, gzip of text/html alone from 20 bytes.
/// (`disable_symlinks off` is nginx's default too; duality keeps links
/// inside the root unless the configuration says it.)
const NGINX_DEFAULTS: [(&str, &str); 5] = [
    ("--absolute-redirect", "on"),
    ("--etag", "nginx"),
    ("--idle-timeout", "75"),
    ("--gzip-types", "text/html"),
    ("--gzip-min-length", "20"),
];

/// Array flags one nginx list stands for.
const GROUPS: &[&[&str]] = &[
    &["--allow", "--deny"],
    &["--add-header", "--add-header-always"],
];

/// Directives of tuning that has no counterpart here, with why.
const IGNORED: &[(&str, &str)] = &[
    ("sendfile", "always used from --sendfile-threshold"),
    ("tcp_nopush", "the server batches its writes"),
    ("tcp_nodelay", "always on"),
    ("error_log", "errors go to standard error"),
    (
        "worker_rlimit_nofile",
        "the descriptor limit is raised to its hard limit",
    ),
    ("daemon", "run it under a supervisor"),
    ("master_process", "one process"),
    ("multi_accept", "the models accept as they do"),
    ("accept_mutex", "the models accept as they do"),
    ("use", "epoll or io_uring (--io)"),
    ("server_name", "one server answers every name"),
    ("server_tokens", "Server: duality"),
    ("gzip_vary", "Vary is always sent where a variant exists"),
    ("gzip_buffers", "no buffers to size"),
    ("gzip_proxied", "no proxy is told apart"),
    ("open_file_cache_min_uses", "every file is kept"),
    ("open_file_cache_errors", "misses are not kept"),
    ("output_buffers", "no buffers to size"),
    ("client_body_buffer_size", "bodies are dropped"),
    (
        "client_header_buffer_size",
        "heads are read whole up to --max-head-bytes",
    ),
    ("types_hash_max_size", "no hash to size"),
    ("types_hash_bucket_size", "no hash to size"),
    ("server_names_hash_bucket_size", "no hash to size"),
    ("keepalive_disable", "keep-alive is for every client"),
    (
        "reset_timedout_connection",
        "timed-out connections are closed",
    ),
    ("log_not_found", "misses are logged in the access log only"),
    ("load_module", "modules are built in or absent"),
    ("ssl_protocols", "no TLS listener"),
    ("ssl_prefer_server_ciphers", "no TLS listener"),
    ("ssl_ciphers", "no TLS listener"),
    ("ssl_session_cache", "no TLS listener"),
    ("ssl_session_timeout", "no TLS listener"),
    ("gzip_disable", "no client is left out of gzip"),
    ("ssl_certificate", "no TLS listener"),
    ("ssl_certificate_key", "no TLS listener"),
    ("ssl_dhparam", "no TLS listener"),
    ("ssl_stapling", "no TLS listener"),
    ("ssl_stapling_verify", "no TLS listener"),
    ("aio", "files are read off the loop as --offload says"),
    ("directio", "files are read through the page cache"),
    (
        "sendfile_max_chunk",
        "a sendfile yields to other connections by itself",
    ),
    (
        "client_body_timeout",
        "bodies are dropped as they come (--lingering-timeout)",
    ),
    ("client_body_temp_path", "bodies are dropped"),
    ("variables_hash_max_size", "no hash to size"),
    ("variables_hash_bucket_size", "no hash to size"),
    ("server_names_hash_max_size", "no hash to size"),
    ("resolver", "no name is resolved while serving"),
    ("resolver_timeout", "no name is resolved while serving"),
    (
        "server_name_in_redirect",
        "redirects name the request's host",
    ),
    ("msie_padding", "no MSIE pages"),
    ("msie_refresh", "no MSIE pages"),
    ("postpone_output", "answers go out as they are made"),
    ("worker_cpu_affinity", "see --cpu-affinity"),
    ("worker_priority", "set it with nice"),
    ("timer_resolution", "the loops keep their own clock"),
    ("pcre_jit", "the regex crate compiles its own"),
];

impl State {
    fn context(&mut self, list: &[Directive], level: Level, name: &str) -> Result<(), String> {
        for d in list {
            self.directive(d, level, name)?;
        }
        Ok(())
    }

    /// A flag with one value: an inner level's replaces an outer's.
    fn single(&mut self, flag: &str, value: impl Into<String>) {
        self.single.retain(|(f, _)| f != flag);
        self.single.push((flag.into(), value.into()));
    }

    fn directive(&mut self, d: &Directive, level: Level, name: &str) -> Result<(), String> {
        let at = format!("{name}:{}: \"{}\"", d.line, d.name);
        let err = |why: &str| Err(format!("{at}: {why}"));
        let a = &d.args;
        let n = a.len();
        let one = || -> Result<&str, String> {
            match &a[..] {
                [v] => Ok(v.as_str()),
                _ => Err(format!("{at}: takes one argument")),
            }
        };
        // One nginx time (in seconds, as the flags take it) or size.
        let one_time = || -> Result<String, String> { time(one()?).ok_or(format!("{at}: a time")) };
        let one_size = || -> Result<String, String> {
            Ok(size(one()?).ok_or(format!("{at}: a size"))?.to_string())
        };
        let on_off = || -> Result<&str, String> {
            match &a[..] {
                [v] if v == "on" || v == "off" => Ok(v.as_str()),
                _ => Err(format!("{at}: takes on or off")),
            }
        };
        if d.block.is_some()
            && !matches!(
                d.name.as_str(),
                "http" | "events" | "server" | "location" | "types" | "if"
            )
        {
            return err("a block is not taken here");
        }
        match d.name.as_str() {
            "http" | "events" => {
                let inner = if d.name == "http" {
                    Level::Http
                } else {
                    Level::Main
                };
                self.context(d.block.as_deref().unwrap_or_default(), inner, name)?;
            }
            "server" => {
                let Some(block) = &d.block else {
                    return err("an upstream's server is not served here (no proxying)");
                };
                self.servers += 1;
                if self.servers > 1 {
                    return err(
                        "one server block: duality http serves one site (run one per site)",
                    );
                }
                self.context(block, Level::Server, name)?;
            }
            "include" => {
                let pattern = self.dir.join(one()?);
                for path in matching(&pattern).map_err(|e| format!("{at}: {e}"))? {
                    self.depth += 1;
                    if self.depth > 16 {
                        return err("includes nest more than 16 deep (a loop?)");
                    }
                    self.include(&path, level, &at)?;
                    self.depth -= 1;
                }
            }
            "types" => {
                for t in d.block.as_deref().unwrap_or_default() {
                    if t.block.is_some() || t.args.is_empty() {
                        return Err(format!("{name}:{}: a type and its extensions", t.line));
                    }
                    let mut v = t.name.clone();
                    for ext in &t.args {
                        v.push(' ');
                        v.push_str(ext);
                    }
                    self.arrays.push(("--type", v, level));
                }
            }
            "location" => self.location(d, name)?,
            "if" => {
                let block = d.block.as_deref().unwrap_or_default();
                let returns =
                    |code: &str| matches!(block, [r] if r.name == "return" && r.args == [code]);
                match condition(a).as_str() {
                    "($invalid_referer)" if returns("403") => self.referer_if = true,
                    "($secure_link=)" if returns("403") => self.secure_ifs[0] = true,
                    "($secure_link=0)" if returns("410") => self.secure_ifs[1] = true,
                    _ => {
                        return err(
                            "only `if ($invalid_referer) { return 403; }` and secure_link's \
                             `if ($secure_link = \"\") { return 403; }`, `if ($secure_link = \"0\") \
                             { return 410; }` are taken",
                        )
                    }
                }
            }
            "secure_link" => self.single("--secure-link", one()?),
            "secure_link_md5" => self.single("--secure-link-md5", one()?),
            "user" => {
                if n == 0 || n > 2 {
                    return err("takes a user and perhaps a group");
                }
                self.single("--user", &a[0]);
            }
            "pid" => self.single("--pid-file", one()?),
            "worker_processes" => match one()? {
                "auto" => self.workers = None,
                v => {
                    let w: u64 = v
                        .parse()
                        .ok()
                        .filter(|&w| w > 0)
                        .ok_or(format!("{at}: a number or auto"))?;
                    self.workers = Some(w);
                }
            },
            "worker_connections" => {
                let c: u64 = one()?
                    .parse()
                    .ok()
                    .filter(|&c| c > 0)
                    .ok_or(format!("{at}: a number"))?;
                self.worker_connections = Some(c);
            }
            "listen" => {
                let Some(addr) = a.first() else {
                    return err("takes an address");
                };
                for p in &a[1..] {
                    match p.as_str() {
                        "default_server" | "default" | "bind" | "deferred" => {}
                        "reuseport" => self.single("--accept-balance", "reuseport"),
                        "proxy_protocol" => self.single("--proxy-protocol", "on"),
                        "ssl" | "http2" | "quic" => {
                            return err("TLS and HTTP/2 are not served: put a TLS proxy in front");
                        }
                        p if p.starts_with("backlog=") || p.starts_with("so_keepalive=") => {
                            self.ignored.push(format!("listen {p} ({name}:{})", d.line));
                        }
                        p => return err(&format!("the parameter \"{p}\" is not taken")),
                    }
                }
                self.arrays.push(("--listen", addr.clone(), Level::Server));
            }
            "root" => {
                let root = one()?;
                if !root.starts_with('/') {
                    return err(
                        "give an absolute path (nginx reads a relative one from its prefix)",
                    );
                }
                self.single("--root", root);
            }
            "index" => {
                if n == 0 {
                    return err("takes names");
                }
                for i in a {
                    self.arrays.push(("--index", i.clone(), level));
                }
            }
            "autoindex" => self.single("--autoindex", on_off()?),
            "autoindex_format" => self.single("--autoindex-format", one()?),
            "autoindex_exact_size" => self.single("--autoindex-exact-size", on_off()?),
            "autoindex_localtime" => self.single("--autoindex-localtime", on_off()?),
            "charset" => self.single("--charset", one()?),
            "default_type" => self.single("--default-type", one()?),
            "try_files" => {
                if n < 2 {
                    return err("takes files and a last entry");
                }
                self.single("--try-files", a.join(" "));
            }
            "error_page" => {
                if n < 2 {
                    return err("takes codes and a page");
                }
                self.arrays.push(("--error-page", a.join(" "), level));
            }
            "gzip" => self.single("--gzip", on_off()?),
            "gzip_static" => self.single("--gzip-static", on_off()?),
            "gzip_comp_level" => self.single("--gzip-level", one()?),
            "gzip_min_length" => self.single("--gzip-min-length", one_size()?),
            "gzip_http_version" => self.single("--gzip-http-version", one()?),
            "gzip_types" => {
                if n == 0 {
                    return err("takes types");
                }
                self.single("--gzip-types", a.join(" "));
            }
            "access_log" => match &a[..] {
                [off] if off == "off" => self.access_log = None,
                [path, rest @ ..] => {
                    let mut format = "combined".to_string();
                    for (i, p) in rest.iter().enumerate() {
                        // A writer thread batches the lines already.
                        if p.starts_with("buffer=") || p.starts_with("flush=") {
                            let why = "lines are written by a thread as they come";
                            self.ignored
                                .push(format!("access_log {p} ({name}:{}: {why})", d.line));
                        } else if i == 0 && !p.contains('=') {
                            format = p.clone();
                        } else {
                            return err(&format!(
                                "the parameter \"{p}\" is not taken (gzip=, if=)"
                            ));
                        }
                    }
                    self.access_log = Some((path.clone(), format, d.line));
                }
                _ => return err("takes a path, or off"),
            },
            "log_format" => {
                let mut rest = a.iter();
                let fname = rest.next().ok_or(format!("{at}: takes a name"))?.clone();
                let mut escape = "default".to_string();
                let mut text = String::new();
                for (i, v) in rest.enumerate() {
                    match v.strip_prefix("escape=") {
                        Some(e) if i == 0 => escape = e.into(),
                        _ => text.push_str(v),
                    }
                }
                self.log_formats.insert(fname, (escape, text));
            }
            "keepalive_timeout" => {
                if n == 2 {
                    let why = "no Keep-Alive: timeout= field is sent";
                    self.ignored.push(format!(
                        "keepalive_timeout {} ({name}:{}: {why})",
                        a[1], d.line
                    ));
                } else if n != 1 {
                    return err("takes a time and perhaps a header's time");
                }
                self.single(
                    "--idle-timeout",
                    time(&a[0]).ok_or(format!("{at}: a time"))?,
                );
            }
            "keepalive_requests" => self.single("--keepalive-requests", one()?),
            "keepalive_time"
            | "client_header_timeout"
            | "send_timeout"
            | "lingering_timeout"
            | "lingering_time"
            | "worker_shutdown_timeout" => {
                let flag = match d.name.as_str() {
                    "keepalive_time" => "--keepalive-time",
                    "client_header_timeout" => "--head-timeout",
                    "send_timeout" => "--write-timeout",
                    "lingering_timeout" => "--lingering-timeout",
                    "lingering_time" => "--lingering-time",
                    _ => "--shutdown-grace",
                };
                self.single(flag, one_time()?);
            }
            "client_max_body_size" => self.single("--max-body-bytes", one_size()?),
            "large_client_header_buffers" => match &a[..] {
                [_, s] => self.single(
                    "--max-head-bytes",
                    size(s).ok_or(format!("{at}: a size"))?.to_string(),
                ),
                _ => return err("takes a number and a size"),
            },
            "open_file_cache" => match a.first().map(String::as_str) {
                Some("off") => self.single("--open-file-cache", "0"),
                Some(m) if m.starts_with("max=") => {
                    let max = m["max=".len()..]
                        .parse::<u64>()
                        .map_err(|_| format!("{at}: max=N"))?;
                    self.single("--open-file-cache", max.to_string());
                    if n > 1 {
                        self.ignored.push(format!(
                            "open_file_cache {} ({name}:{})",
                            a[1..].join(" "),
                            d.line
                        ));
                    }
                }
                _ => return err("takes off or max=N"),
            },
            "open_file_cache_valid" => {
                let t = one_time()?;
                let ms = (t.parse::<f64>().unwrap_or(0.0) * 1000.0).round() as u64;
                self.single("--revalidate-ms", ms.to_string());
            }
            "etag" => self.single("--etag", if on_off()? == "on" { "nginx" } else { "off" }),
            "if_modified_since" => self.single("--if-modified-since", one()?),
            "max_ranges" => self.single("--max-ranges", one()?),
            "expires" => {
                if n == 0 {
                    return err("takes a time");
                }
                self.single("--expires", a.join(" "));
            }
            "add_header" => match &a[..] {
                [field, value] => {
                    self.arrays
                        .push(("--add-header", format!("{field}: {value}"), level))
                }
                [field, value, always] if always == "always" => {
                    self.arrays
                        .push(("--add-header-always", format!("{field}: {value}"), level))
                }
                _ => return err("takes a name, a value and perhaps always"),
            },
            "allow" | "deny" => {
                let flag = if d.name == "allow" {
                    "--allow"
                } else {
                    "--deny"
                };
                self.arrays.push((flag, one()?.to_string(), level));
            }
            "satisfy" => self.single("--satisfy", one()?),
            "auth_basic" => match one()? {
                // An inner `off` drops the outer realm and its users.
                "off" => self
                    .single
                    .retain(|(f, _)| f != "--auth-basic" && f != "--auth-basic-user-file"),
                realm => self.single("--auth-basic", realm),
            },
            "auth_basic_user_file" => self.single("--auth-basic-user-file", one()?),
            "return" => {
                if n == 0 || n > 2 {
                    return err("takes a code and perhaps a text or address");
                }
                // nginx's `return URL` is a 302.
                let v = match a[0].parse::<u16>() {
                    Ok(_) => a.join(" "),
                    Err(_) => format!("302 {}", a[0]),
                };
                self.single("--return", v);
            }
            "rewrite" => {
                if !(2..=3).contains(&n) {
                    return err("takes a pattern, a replacement and perhaps a flag");
                }
                self.arrays.push(("--rewrite", a.join(" "), Level::Server));
            }
            "limit_req_zone" => {
                let mut zone = None;
                let mut rate = None;
                for v in a {
                    if let Some(z) = v.strip_prefix("zone=") {
                        zone = z
                            .split_once(':')
                            .map(|(n, s)| (n.to_string(), s.to_string()));
                    } else if let Some(r) = v.strip_prefix("rate=") {
                        rate = Some(r.to_string());
                    } else if v != "$binary_remote_addr" && v != "$remote_addr" {
                        return err("only a zone on $binary_remote_addr is taken");
                    }
                }
                match (zone, rate) {
                    (Some((z, s)), Some(r)) => {
                        self.req_zones.insert(z, (r, s));
                    }
                    _ => return err("takes zone=NAME:SIZE and rate="),
                }
            }
            "limit_req" => {
                let zone = a
                    .first()
                    .and_then(|z| z.strip_prefix("zone="))
                    .ok_or(format!("{at}: takes zone=NAME first"))?;
                self.limit_req
                    .push((zone.to_string(), a[1..].to_vec(), d.line));
            }
            "limit_req_status" => self.limit_req_status = Some(one()?.to_string()),
            "limit_conn_zone" => match &a[..] {
                [key, z] if key == "$binary_remote_addr" || key == "$remote_addr" => {
                    let (zn, s) = z
                        .strip_prefix("zone=")
                        .and_then(|z| z.split_once(':'))
                        .ok_or(format!("{at}: takes zone=NAME:SIZE"))?;
                    self.conn_zones.insert(zn.to_string(), s.to_string());
                }
                _ => return err("only a zone on $binary_remote_addr is taken"),
            },
            "limit_conn" => match &a[..] {
                [zone, count] => self.limit_conn = Some((zone.clone(), count.clone(), d.line)),
                _ => return err("takes a zone and a number"),
            },
            "limit_conn_status" => self.limit_conn_status = Some(one()?.to_string()),
            "limit_rate" => self.single("--limit-rate", one()?),
            "limit_rate_after" => self.single("--limit-rate-after", one()?),
            "set_real_ip_from" => self
                .arrays
                .push(("--real-ip-from", one()?.to_string(), level)),
            "real_ip_header" => self.single("--real-ip-header", one()?),
            "real_ip_recursive" => self.single("--real-ip-recursive", on_off()?),
            "valid_referers" => {
                if n == 0 {
                    return err("takes referers");
                }
                self.referers = Some(a.join(" "));
            }
            "absolute_redirect" => self.single("--absolute-redirect", on_off()?),
            "disable_symlinks" => match one()? {
                "off" => self.single("--symlinks", "any"),
                _ => return err("only off is taken (--symlinks inside-root is duality's default)"),
            },
            other => match IGNORED.iter().find(|(n, _)| *n == other) {
                Some((_, why)) => self
                    .ignored
                    .push(format!("{other} ({name}:{}: {why})", d.line)),
                None => return err("not translated (no counterpart in duality http)"),
            },
        }
        Ok(())
    }

    /// One included file: a types file (mime.types) is the table's own
    /// flag; any other is read in place.
    fn include(&mut self, path: &Path, level: Level, at: &str) -> Result<(), String> {
        let text =
            std::fs::read_to_string(path).map_err(|e| format!("{at}: {}: {e}", path.display()))?;
        let shown = path.display().to_string();
        let list = parse(&text).map_err(|(line, e)| format!("{shown}:{line}: {e}"))?;
        if let [Directive {
            name,
            args,
            block: Some(_),
            ..
        }] = &list[..]
        {
            if name == "types" && args.is_empty() {
                self.single("--types-file", shown);
                return Ok(());
            }
        }
        self.context(&list, level, &shown)
    }

    fn location(&mut self, d: &Directive, name: &str) -> Result<(), String> {
        let at = format!("{name}:{}: \"location {}\"", d.line, d.args.join(" "));
        let block = d.block.as_deref().ok_or(format!("{at}: needs a block"))?;
        let args: Vec<&str> = d.args.iter().map(String::as_str).collect();
        match &args[..] {
            ["/"] => {
                for x in block {
                    match scoped(x) {
                        true => self.root_scoped.push(x.clone()),
                        false => {
                            if !quiet(x) {
                                self.root_other.push(format!("{} ({name}:{})", x.name, x.line));
                            }
                            self.directive(x, Level::Location, name)?
                        }
                    }
                }
                Ok(())
            }
            ["~", r"/\."] if matches!(block, [x] if x.name == "deny" && x.args == ["all"]) => {
                self.single("--dotfiles", "deny");
                Ok(())
            }
            ["=", path] if matches!(block, [x] if x.name == "stub_status" && x.args.is_empty()) => {
                self.single("--stub-status", *path);
                Ok(())
            }
            // `location = /favicon.ico { log_not_found off; access_log off; }`:
            // quieter logs there, nothing served differently.
            // nginx.org's default.conf: `location = /50x.html { root R; }`
            // beside the same root is the server's own answer.
            ["=", path]
                if matches!(block, [x] if x.name == "root" && x.args.len() == 1) =>
            {
                let root = block[0].args[0].clone();
                let place = format!("{name}:{}", d.line);
                self.same_root.push((path.to_string(), root, place));
                Ok(())
            }
            // `location ~* \.(css|js|png)$ { expires 30d; }` and any other
            // regular expression: a `--location` of the directives set by
            // path.
            [op, pattern] if *op == "~*" || *op == "~" => {
                self.group(&format!("{op} {pattern}"), block, at, name)
            }
            ["^~", prefix] if prefix.starts_with('/') && prefix.ends_with('/') && !block.is_empty() => {
                self.prefix_location(prefix, true, block, at, name)
            }
            ["^~", prefix] if prefix.starts_with('/') => {
                self.group(&format!("^~ {prefix}"), block, at, name)
            }
            // A prefix: its alias, and nginx's secure_link idiom there.
            [prefix] if prefix.starts_with('/') && prefix.ends_with('/') && !block.is_empty() => {
                self.prefix_location(prefix, false, block, at, name)
            }
            // Any other prefix or exact path: a `--location` of the
            // directives set by path.
            [prefix] if prefix.starts_with('/') => self.group(prefix, block, at, name),
            [exact] if exact.starts_with("=/") => self.group(&format!("= {}", &exact[1..]), block, at, name),
            ["=", path] if path.starts_with('/') => self.group(&format!("= {path}"), block, at, name),
            _ => Err(format!(
                "{at}: not translated (taken: prefix and exact locations setting {}; \
                 `location /`, an alias, `~ /\\.` deny all, `= PATH` stub_status, `~* \\.(exts)$` expires)",
                taken()
            )),
        }
    }

    /// A prefix location (`only`: nginx's `^~`, no regular expression
    /// tried after it): its alias or root, listings, secure_link, and the
    /// directives set by path as a `--location` group.
    fn prefix_location(
        &mut self,
        prefix: &str,
        only: bool,
        block: &[Directive],
        at: String,
        name: &str,
    ) -> Result<(), String> {
        let key = match only {
            true => format!("^~ {prefix}"),
            false => prefix.to_string(),
        };
        if only {
            self.only_prefixes.push(prefix.to_string());
        }
        let mut secured = false;
        let mut rooted = false;
        let mut list = Vec::new();
        for x in block {
            match x.name.as_str() {
                _ if scoped(x) => list.push(x.clone()),
                _ if quiet(x) => self.quieted(x, prefix, name),
                "alias" | "root" if x.args.len() == 1 => {
                    // nginx's `root R` there serves R + the whole
                    // path: the alias of the prefix to R/PREFIX.
                    let dir = match x.name == "root" {
                        true => format!("{}{prefix}", x.args[0].trim_end_matches('/')),
                        false => x.args[0].clone(),
                    };
                    if !dir.starts_with('/') {
                        return Err(format!(
                            "{name}:{}: \"{}\": give an absolute path",
                            x.line, x.name
                        ));
                    }
                    if std::mem::replace(&mut rooted, true) {
                        return Err(format!(
                            "{name}:{}: \"{}\": a second root or alias in {prefix}",
                            x.line, x.name
                        ));
                    }
                    let dir = dir.trim_end_matches('/');
                    self.arrays.push(("--alias", format!("{prefix} {dir}"), Level::Server));
                }
                "secure_link" | "secure_link_md5" => {
                    secured = true;
                    self.directive(x, Level::Location, name)?;
                }
                // Listings there only (their style is the one
                // listings have anywhere, which is only there).
                "autoindex" if x.args == ["on"] => {
                    self.arrays.push(("--autoindex-under", prefix.to_string(), Level::Server));
                }
                "autoindex" if x.args == ["off"] => {}
                "autoindex_format" | "autoindex_exact_size" | "autoindex_localtime" => {
                    self.directive(x, Level::Location, name)?;
                }
                "if" if condition(&x.args).starts_with("($secure_link=") => {
                    secured = true;
                    self.directive(x, Level::Location, name)?;
                }
                _ => {
                    return Err(format!(
                        "{name}:{}: \"{}\": only alias, root, autoindex, the secure_link directives and {} are taken in a prefix location (other settings are the server's)",
                        x.line, x.name, taken()
                    ))
                }
            }
        }
        if secured && self.secure_prefix.replace(prefix.to_string()).is_some() {
            return Err(format!("{at}: secure_link in one location only"));
        }
        match list.is_empty() {
            // A location of its own all the same (see finish).
            true => {
                self.plain_prefixes.push((key, at));
                Ok(())
            }
            false => self.push_group(&key, list, at),
        }
    }

    /// A location of directives set by path (and quieter logs): a
    /// `--location` group, made at the end (the server's realm may come
    /// later in the file).
    fn group(
        &mut self,
        at_path: &str,
        block: &[Directive],
        at: String,
        name: &str,
    ) -> Result<(), String> {
        let mut list = Vec::new();
        for x in block {
            match x.name.as_str() {
                _ if scoped(x) => list.push(x.clone()),
                _ if quiet(x) => self.quieted(x, at_path, name),
                _ => {
                    return Err(format!(
                        "{name}:{}: \"{}\": only {} are taken in this location (other settings are the server's)",
                        x.line,
                        x.name,
                        taken()
                    ))
                }
            }
        }
        // Only `log_not_found off`: nothing of its own.
        if list.is_empty() && !block.is_empty() {
            return Ok(());
        }
        self.push_group(at_path, list, at)
    }

    fn push_group(
        &mut self,
        at_path: &str,
        scoped: Vec<Directive>,
        at: String,
    ) -> Result<(), String> {
        // Refused here, with its line, rather than by the flag.
        duality_http::location::Match::parse(at_path).map_err(|e| format!("{at}: {e}"))?;
        if self.groups.iter().any(|(p, _, _)| p == at_path) {
            return Err(format!("{at}: a second location for {at_path}"));
        }
        self.groups.push((at_path.to_string(), scoped, at));
        Ok(())
    }

    /// `log_not_found off` in a location: listed as without effect.
    fn quieted(&mut self, x: &Directive, at_path: &str, name: &str) {
        self.ignored.push(format!(
            "{} {} in location {at_path} ({name}:{}: misses are logged in the access log only)",
            x.name,
            x.args.join(" "),
            x.line
        ));
    }

    /// The words of `--location`'s group for `at_path`: its directives'
    /// flags, between braces, as one word.
    fn group_word(&self, at_path: &str, list: &[Directive], name: &str) -> Result<String, String> {
        let mut sub = State {
            dir: self.dir.clone(),
            ..State::default()
        };
        let mut words: Vec<String> = Vec::new();
        for x in list {
            match (x.name.as_str(), x.args.as_slice()) {
                (d @ ("auth_basic" | "access_log"), [off]) if off == "off" => {
                    words.extend([format!("--{}", d.replace('_', "-")), "off".into()])
                }
                ("internal", []) => words.push("--internal".into()),
                _ => sub.directive(x, Level::Location, name)?,
            }
        }
        let has = |f: &str| sub.single.iter().any(|(g, _)| g == f);
        // A file without a realm takes the server's realm, as nginx's
        // inheritance does.
        if has("--auth-basic-user-file") && !has("--auth-basic") {
            let realm = self
                .single
                .iter()
                .find(|(f, _)| f == "--auth-basic")
                .ok_or(format!(
                    "{name}: location {at_path}: auth_basic_user_file without auth_basic"
                ))?;
            words.extend(["--auth-basic".into(), realm.1.clone()]);
        }
        for (f, v) in &sub.single {
            words.extend([f.clone(), v.clone()]);
        }
        for (f, v, _) in &sub.arrays {
            words.extend([f.to_string(), v.clone()]);
        }
        // `OPERATOR ARGUMENT`, or a prefix alone.
        let mut all: Vec<&str> = match at_path.split_once(' ') {
            Some((op, arg)) if ["=", "^~", "~", "~*"].contains(&op) => vec![op, arg],
            _ => vec![at_path],
        };
        all.push("{");
        all.extend(words.iter().map(String::as_str));
        all.push("}");
        super::http_location::join(&all)
            .ok_or_else(|| format!("{name}: location {at_path}: a NUL byte"))
    }

    fn finish(mut self, name: &str) -> Result<Translated, String> {
        let mut args = Vec::new();
        // `location /`'s settings are the server's, unless other locations
        // take their own: then `/`'s own (the others inherit the server's,
        // as in nginx).
        let root_scoped = std::mem::take(&mut self.root_scoped);
        if !self.groups.is_empty() || !root_scoped.is_empty() {
            for (prefix, at) in std::mem::take(&mut self.plain_prefixes) {
                self.push_group(&prefix, Vec::new(), at)?;
            }
        }
        // (A location that returns answers before any of them.)
        let serving = self
            .groups
            .iter()
            .find(|(_, list, _)| !list.iter().any(|x| x.name == "return"));
        if let (Some((p, _, at)), Some(other)) = (serving, self.root_other.first()) {
            return Err(format!(
                "{at}: `location /` sets {other}, which nginx does not apply under {p}, \
                 and which duality would (it is the server's): give it in the server block"
            ));
        }
        if self.groups.is_empty() {
            for x in &root_scoped {
                self.directive(x, Level::Location, name)?;
            }
        } else if !root_scoped.is_empty() {
            self.groups
                .insert(0, ("/".into(), root_scoped, format!("{name}: location /")));
        }
        for (at_path, list, _) in &self.groups {
            args.push("--location".to_string());
            args.push(self.group_word(at_path, list, name)?);
        }
        if let Some(w) = self.workers {
            args.push("--model".into());
            args.push(format!("symped:{w}"));
        }
        if let Some(c) = self.worker_connections {
            args.push("--max-conns".into());
            // `auto`: a worker per core, as the model's default.
            let workers = self
                .workers
                .unwrap_or_else(|| duality_models::cores() as u64);
            args.push((c * workers).to_string());
        }
        // Arrays: the deepest level's, as nginx merges them (allow and
        // deny are one list, as are add_header with and without always).
        // Listing everywhere makes a location's own listing moot.
        if self
            .single
            .iter()
            .any(|(f, v)| f == "--autoindex" && v == "on")
        {
            self.arrays.retain(|(f, _, _)| *f != "--autoindex-under");
        }
        let root = self
            .single
            .iter()
            .find(|(f, _)| f == "--root")
            .map(|(_, r)| r.clone());
        for (path, r, place) in std::mem::take(&mut self.same_root) {
            let server = root.as_deref().map(|x| x.trim_end_matches('/'));
            if server != Some(r.trim_end_matches('/')) {
                return Err(format!(
                    "{place}: \"location = {path}\": a root of its own for {path} is not translated \
                     (the server's is {})",
                    root.as_deref().unwrap_or("not given")
                ));
            }
            let why = "the server's root serves it";
            self.ignored
                .push(format!("location = {path} ({place}: {why})"));
        }
        let regex = self.groups.iter().find(|(p, _, _)| p.starts_with('~'));
        // (A `^~` prefix's alias is not: no regex is tried there.)
        let tried = |v: &str| {
            let prefix = v.split(' ').next().unwrap_or_default();
            !self.only_prefixes.iter().any(|p| p == prefix)
        };
        let alias = self
            .arrays
            .iter()
            .any(|(f, v, _)| *f == "--alias" && tried(v));
        if let (Some((_, _, at)), true) = (regex, alias) {
            // nginx's regular-expression location wins over a prefix one:
            // the files it takes under the alias would be looked for under
            // the root, which a flag cannot say.
            return Err(format!(
                "{at}: a regular-expression location beside an alias location: nginx serves \
                 what it matches under the alias's prefix from the root (its regex location \
                 wins); not translated"
            ));
        }
        let mut done: Vec<&str> = Vec::new();
        for i in 0..self.arrays.len() {
            let flag = self.arrays[i].0;
            let group = GROUPS
                .iter()
                .find(|g| g.contains(&flag))
                .map_or(std::slice::from_ref(&flag), |g| &g[..]);
            if done.contains(&flag) {
                continue;
            }
            done.extend(group.iter().copied());
            let of = |(g, _, _): &&(&str, String, Level)| group.contains(g);
            let deepest = self.arrays.iter().filter(of).map(|x| x.2).max();
            for (g, v, _) in self
                .arrays
                .iter()
                .filter(of)
                .filter(|x| Some(x.2) == deepest)
            {
                args.push((*g).to_string());
                args.push(v.clone());
            }
        }
        // Where nginx's defaults are not duality's, nginx's: the site
        // behaves as it did.
        for (flag, value) in NGINX_DEFAULTS {
            if !self.single.iter().any(|(f, _)| f == flag) {
                args.push(flag.to_string());
                args.push(value.to_string());
            }
        }
        for (f, v) in &self.single {
            args.push(f.clone());
            args.push(v.clone());
        }
        if let Some((path, format, line)) = self.access_log.take() {
            args.push("--access-log".into());
            args.push(path);
            if format != "combined" {
                let (escape, text) = self.log_formats.get(&format).ok_or(format!(
                    "{name}:{line}: \"access_log\": no log_format \"{format}\""
                ))?;
                args.extend([
                    "--log-format".into(),
                    text.clone(),
                    "--log-escape".into(),
                    escape.clone(),
                ]);
            }
        }
        for (zone, rest, line) in &self.limit_req {
            let (rate, size) = self.req_zones.get(zone).ok_or(format!(
                "{name}:{line}: \"limit_req\": no limit_req_zone \"{zone}\""
            ))?;
            let mut v = format!("{rate} zone={size}");
            for r in rest {
                v.push(' ');
                v.push_str(r);
            }
            if let Some(s) = &self.limit_req_status {
                v.push_str(&format!(" status={s}"));
            }
            args.extend(["--limit-req".into(), v]);
        }
        if let Some((zone, count, line)) = &self.limit_conn {
            if !self.conn_zones.contains_key(zone) {
                return Err(format!(
                    "{name}:{line}: \"limit_conn\": no limit_conn_zone \"{zone}\""
                ));
            }
            let mut v = count.clone();
            if let Some(s) = &self.limit_conn_status {
                v.push_str(&format!(" status={s}"));
            }
            args.extend(["--limit-conn".into(), v]);
        }
        let secure = self.single.iter().any(|(f, _)| f == "--secure-link");
        match (secure, self.secure_ifs) {
            (true, [true, true]) => {
                if let Some(p) = &self.secure_prefix {
                    args.extend(["--secure-link-prefix".into(), p.clone()]);
                }
            }
            (true, _) => {
                return Err(format!(
                    "{name}: \"secure_link\" without both `if ($secure_link = \"\") {{ return 403; }}` \
                     and `if ($secure_link = \"0\") {{ return 410; }}`: duality refuses as they do"
                ))
            }
            (false, [false, false]) => {}
            (false, _) => return Err(format!("{name}: `if ($secure_link …)` without secure_link")),
        }
        match (&self.referers, self.referer_if) {
            (Some(r), true) => args.extend(["--valid-referers".into(), r.clone()]),
            (Some(_), false) => {
                return Err(format!(
                    "{name}: \"valid_referers\" without `if ($invalid_referer) {{ return 403; }}` refuses nothing"
                ))
            }
            (None, true) => return Err(format!("{name}: `if ($invalid_referer)` without valid_referers")),
            (None, false) => {}
        }
        Ok(Translated {
            args,
            ignored: self.ignored,
        })
    }
}

/// The files an `include` names: the path itself, or with `*` and `?` in
/// its last component (nginx's `include sites-enabled/*`), the files that
/// match, sorted (none is no error, as nginx's glob).
fn matching(pattern: &Path) -> Result<Vec<PathBuf>, String> {
    let last = pattern
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let dir = pattern.parent().unwrap_or(Path::new("/"));
    if dir.to_string_lossy().contains(['*', '?', '[']) || last.contains('[') {
        return Err("a pattern outside the file's name is not taken".into());
    }
    if !last.contains(['*', '?']) {
        return Ok(vec![pattern.to_path_buf()]);
    }
    let mut found = Vec::new();
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        // glob(3): `*` does not match a leading dot.
        if !name.starts_with('.')
            && wildcard(last.as_bytes(), name.as_bytes())
            && entry.path().is_file()
        {
            found.push(entry.path());
        }
    }
    found.sort();
    Ok(found)
}

/// Whether `name` matches `pattern` (`*`: any run, `?`: one byte).
fn wildcard(pattern: &[u8], name: &[u8]) -> bool {
    match (pattern.first(), name.first()) {
        (None, None) => true,
        (Some(b'*'), _) => {
            wildcard(&pattern[1..], name) || (!name.is_empty() && wildcard(pattern, &name[1..]))
        }
        (Some(b'?'), Some(_)) => wildcard(&pattern[1..], &name[1..]),
        (Some(p), Some(n)) if p == n => wildcard(&pattern[1..], &name[1..]),
        _ => false,
    }
}

/// An `if`'s condition, its words run together: `($secure_link = "")`
/// reads `($secure_link=)` however it was spaced or quoted.
fn condition(args: &[String]) -> String {
    args.concat()
}

/// What a `--location` group takes, for messages.
fn taken() -> String {
    format!("{}, access_log off, internal", SCOPED.join(", "))
}

/// Whether a `--location` group takes `d`.
fn scoped(d: &Directive) -> bool {
    SCOPED.contains(&d.name.as_str())
        || (d.name == "access_log" && d.args == ["off"])
        || (d.name == "internal" && d.args.is_empty())
}

/// Whether `d` only quiets logging (`log_not_found off`, `access_log
/// off`), which changes nothing that is served. (`allow all` does where
/// the server denies: a location's rules replace the server's.)
fn quiet(d: &Directive) -> bool {
    let args: Vec<&str> = d.args.iter().map(String::as_str).collect();
    matches!(
        (d.name.as_str(), &args[..]),
        ("log_not_found", ["off"]) | ("access_log", ["off"])
    )
}

/// An nginx time (`75s`, `1h30m`, `500ms`, `90`: seconds) in seconds,
/// as `duality http`'s flags take it.
fn time(v: &str) -> Option<String> {
    let mut total = 0f64;
    let mut rest = v;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let n: f64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let (scale, len) = match rest.as_bytes() {
            [b'm', b's', ..] => (0.001, 2),
            [b's', ..] => (1.0, 1),
            [b'm', ..] => (60.0, 1),
            [b'h', ..] => (3600.0, 1),
            [b'd', ..] => (86400.0, 1),
            [b'w', ..] => (604800.0, 1),
            [] => (1.0, 0),
            _ => return None,
        };
        total += n * scale;
        rest = &rest[len..];
    }
    (!v.is_empty()).then(|| format!("{total}"))
}

/// An nginx size (`1m`, `512k`, `1024`) in bytes.
fn size(v: &str) -> Option<u64> {
    let (n, scale) = match v.as_bytes().last()? {
        b'k' | b'K' => (&v[..v.len() - 1], 1 << 10),
        b'm' | b'M' => (&v[..v.len() - 1], 1 << 20),
        b'g' | b'G' => (&v[..v.len() - 1], 1 << 30),
        _ => (v, 1),
    };
    n.parse::<u64>().ok()?.checked_mul(scale)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The flags of `conf` but nginx's defaults.
    fn args(conf: &str) -> Vec<String> {
        args_in(conf, Path::new("/nonexistent"))
    }

    /// [`args`] with relative includes read from `dir`.
    fn args_in(conf: &str, dir: &Path) -> Vec<String> {
        let all = translate(conf, "t.conf", dir).unwrap().args;
        let mut out = Vec::new();
        for pair in all.chunks(2) {
            if !NGINX_DEFAULTS.contains(&(pair[0].as_str(), pair[1].as_str())) {
                out.extend_from_slice(pair);
            }
        }
        out
    }

    #[test]
    fn nginx_defaults_unless_said() {
        let all = translate("etag off;", "t.conf", Path::new("/"))
            .unwrap()
            .args;
        assert_eq!(
            all,
            [
                "--absolute-redirect",
                "on",
                "--idle-timeout",
                "75",
                "--gzip-types",
                "text/html",
                "--gzip-min-length",
                "20",
                "--etag",
                "off",
            ]
        );
    }

    fn refused(conf: &str) -> String {
        translate(conf, "t.conf", Path::new("/nonexistent")).unwrap_err()
    }

    fn d(name: &str, args: &[&str], line: usize) -> Directive {
        Directive {
            name: name.into(),
            args: args.iter().map(|a| a.to_string()).collect(),
            block: None,
            line,
        }
    }

    #[test]
    fn nginx_syntax() {
        let text = "a 1 '2 3';# note\nb \"x\\\"y\" 'it\\'s' \\n;\nc {\n  d ${e}f;\n}\n";
        let got = parse(text).unwrap();
        assert_eq!(got[0], d("a", &["1", "2 3"], 1));
        assert_eq!(got[1], d("b", &["x\"y", "it's", "\\n"], 2));
        assert_eq!(got[2].block.as_deref().unwrap(), [d("d", &["${e}f"], 4)]);
        for (bad, line, says) in [
            ("a 1", 1, "not ended"),
            ("a {\n b;\n", 3, "not closed"),
            ("}", 1, "unexpected"),
            ("a 'x\n;", 1, "not closed"),
            ("a 'x'y;", 1, "after a quoted"),
            ("\n;", 2, "without a name"),
            (&"a {".repeat(100_000), 1, "nest more than 64"),
        ] {
            let (l, e) = parse(bad).unwrap_err();
            assert_eq!(l, line, "{bad:?}");
            assert!(e.contains(says), "{bad:?}: {e}");
        }
    }

    #[test]
    fn a_site_becomes_flags() {
        let conf = "worker_processes 2; events { worker_connections 512; }
            http {
              log_format f escape=json '{\"s\":$status,' '\"u\":\"$uri\"}';
              access_log /var/log/a.log f;
              add_header X-Outer 1;
              index outer.html;
              keepalive_timeout 1m30s;
              client_max_body_size 2m;
              server {
                listen 127.0.0.1:8081 reuseport;
                listen [::1]:8081;
                root /srv/www;
                index index.html index.htm;
                add_header X-A \"1 2\" always;
                location / { try_files $uri $uri/ /index.html; expires 1h; }
                location /static/ { alias /srv/static/; }
                location ~ /\\. { deny all; }
                location = /status { stub_status; }
                allow 10.0.0.0/8; deny all;
                return 301 https://$host$request_uri;
              }
            }";
        let got = args(conf);
        let want = [
            // `location /`'s own, not the alias prefix's (nor nginx's).
            "--location",
            "/ { --try-files '$uri $uri/ /index.html' --expires 1h }",
            "--location",
            "/static/ { }",
            "--model",
            "symped:2",
            "--max-conns",
            "1024",
            "--add-header-always",
            "X-A: 1 2",
            "--index",
            "index.html",
            "--index",
            "index.htm",
            "--listen",
            "127.0.0.1:8081",
            "--listen",
            "[::1]:8081",
            "--alias",
            "/static/ /srv/static",
            "--allow",
            "10.0.0.0/8",
            "--deny",
            "all",
            "--idle-timeout",
            "90",
            "--max-body-bytes",
            "2097152",
            "--accept-balance",
            "reuseport",
            "--root",
            "/srv/www",
            "--dotfiles",
            "deny",
            "--stub-status",
            "/status",
            "--return",
            "301 https://$host$request_uri",
            "--access-log",
            "/var/log/a.log",
            "--log-format",
            "{\"s\":$status,\"u\":\"$uri\"}",
            "--log-escape",
            "json",
        ];
        assert_eq!(got, want);
    }

    #[test]
    fn limits_referers_and_auth() {
        let conf = "http {
              limit_req_zone $binary_remote_addr zone=one:10m rate=5r/s;
              limit_conn_zone $binary_remote_addr zone=c:1m;
              limit_req_status 429;
              auth_basic Outer; auth_basic_user_file /etc/users;
              server {
                limit_req zone=one burst=10 nodelay;
                limit_conn c 4;
                limit_conn_status 444;
                valid_referers none blocked *.example.com;
                if ($invalid_referer) { return 403; }
                auth_basic off;
              }
            }";
        assert_eq!(
            args(conf),
            [
                "--limit-req",
                "5r/s zone=10m burst=10 nodelay status=429",
                "--limit-conn",
                "4 status=444",
                "--valid-referers",
                "none blocked *.example.com",
            ]
        );
        assert!(refused("limit_req zone=x;").contains("no limit_req_zone \"x\""));
        assert!(refused("valid_referers none;").contains("refuses nothing"));
    }

    #[test]
    fn what_is_refused_names_its_line() {
        for (conf, says) in [
            (
                "server {}\nserver {}",
                "t.conf:2: \"server\": one server block",
            ),
            (
                "location / {\n proxy_pass http://x;\n}",
                "t.conf:2: \"proxy_pass\": not translated",
            ),
            (
                "location @php { deny all; }",
                "\"location @php\": not translated (taken: prefix and exact",
            ),
            ("listen 443 ssl;", "TLS"),
            ("root www;", "absolute path"),
            ("if ($x) { return 403; }", "only `if ($invalid_referer)"),
            ("keepalive_timeout 5 5 5;", "a header's time"),
            ("include /nonexistent/x.conf;", "/nonexistent/x.conf"),
            ("include /nonexistent/*/a.conf;", "outside the file's name"),
            ("access_log /a nope;", "no log_format \"nope\""),
        ] {
            let e = refused(conf);
            assert!(e.contains(says), "{conf}: {e}");
        }
        let conf = "access_log /l main buffer=32k flush=5s; log_format main x;\n\
                    keepalive_timeout 65 60;";
        let t = translate(conf, "t.conf", Path::new("/")).unwrap();
        assert!(
            t.args.ends_with(&[
                "--access-log".into(),
                "/l".into(),
                "--log-format".into(),
                "x".into(),
                "--log-escape".into(),
                "default".into()
            ]),
            "{:?}",
            t.args
        );
        assert_eq!(t.ignored.len(), 3, "{:?}", t.ignored);
        assert!(refused("access_log /l combined gzip;").contains("\"gzip\" is not taken"));
        let t = translate("sendfile on;\nerror_log x;", "t.conf", Path::new("/")).unwrap();
        assert_eq!(t.args.len(), 2 * NGINX_DEFAULTS.len());
        assert_eq!(t.ignored.len(), 2);
        assert!(
            t.ignored[1].starts_with("error_log (t.conf:2"),
            "{:?}",
            t.ignored
        );
    }

    #[test]
    fn includes_and_types() {
        let dir = std::env::temp_dir().join(format!("duality-nginx-conf-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("mime.types"), "types {\n text/html html;\n}\n").unwrap();
        std::fs::write(dir.join("common.conf"), "charset utf-8;\n").unwrap();
        std::fs::write(dir.join("x.conf"), "charset koi8-r;\n").unwrap();
        let conf = "include mime.types; include common.conf; types { text/plain log txt; }";
        let got = args(&format!("include {}/x.conf;", dir.display()));
        assert_eq!(got, ["--charset", "koi8-r"]);
        // A pattern: its files in order (common, then x: x's charset);
        // none matching is no error.
        let got = args(&format!(
            "include {0}/*.conf; include {0}/*.none;",
            dir.display()
        ));
        assert_eq!(got, ["--charset", "koi8-r"]);
        assert!(wildcard(b"*.co?f", b"a.conf") && !wildcard(b"*.conf", b"a.conf~"));
        assert!(wildcard(b"*", b"default") && !wildcard(b"a*b", b"ac"));
        let t = args_in(conf, &dir);
        let types = dir.join("mime.types").display().to_string();
        assert_eq!(
            t,
            [
                "--type",
                "text/plain log txt",
                "--types-file",
                &types,
                "--charset",
                "utf-8"
            ]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn location_idioms() {
        let conf = "expires 1h;
            location = /favicon.ico { log_not_found off; access_log off; }
            location ~* \\.(css|js|woff2?|JPG)$ { expires 30d; access_log off; }";
        let t = translate(conf, "t.conf", Path::new("/")).unwrap();
        let mut got = t.args;
        got.retain(|a| !NGINX_DEFAULTS.iter().any(|(f, v)| a == f || a == v));
        assert_eq!(
            got,
            [
                "--location",
                "= /favicon.ico { --access-log off }",
                "--location",
                r"~* '\.(css|js|woff2?|JPG)$' { --access-log off --expires 30d }",
                "--expires",
                "1h",
            ]
        );
        assert!(
            t.ignored[0].starts_with("log_not_found off in location = /favicon.ico (t.conf:2"),
            "{:?}",
            t.ignored
        );
        // `^~`, `~`, and each group read back by --location's parser.
        let got = args(r"location ^~ /a/ { expires 1d; } location ~ ^/b/(x|y)\.txt$ { deny all; }");
        assert_eq!(
            got[..4],
            [
                "--location",
                "^~ /a/ { --expires 1d }",
                "--location",
                r"~ '^/b/(x|y)\.txt$' { --deny all }"
            ]
        );
        for g in [&got[1], &got[3]] {
            super::super::http_location::parse(g).unwrap();
        }
        for (conf, says) in [
            (
                "location ~* \\.(css)$ { index x; }",
                "\"index\": only try_files, error_page, gzip,",
            ),
            ("location ~ ( { expires 1d; }", "regex parse error"),
            (
                "location = /x { index i; }",
                "\"index\": only try_files, error_page, gzip, gzip_static",
            ),
            (
                "location / { index i.html; } location /a/ { deny all; }",
                "`location /` sets index (t.conf:1), which nginx does not apply under /a/",
            ),
            (
                "location /a/ { deny all; } location /a/ { deny all; }",
                "a second location for /a/",
            ),
            (
                "location /a { auth_basic_user_file /u; }",
                "auth_basic_user_file without auth_basic",
            ),
            (
                "location ~* \\.(css)$ { expires 1d; } location /s/ { alias /d/; }",
                "(its regex location wins)",
            ),
        ] {
            let e = refused(conf);
            assert!(e.contains(says), "{conf}: {e}");
        }
    }

    #[test]
    fn locations_with_settings_of_their_own() {
        let conf = "add_header X-S 1; auth_basic_user_file /u;
            location / { add_header X-R 1; }
            location /admin/ { auth_basic Staff; allow 10.0.0.0/8; deny all; access_log off; }
            location = /old { return https://x/new; }
            location =/gone { return 410; }
            location /files { limit_rate 1k; limit_rate_after 2k; expires 1h; auth_basic off; }";
        let got = translate(conf, "t.conf", Path::new("/nonexistent")).unwrap();
        let groups: Vec<&str> = got
            .args
            .windows(2)
            .filter(|w| w[0] == "--location")
            .map(|w| w[1].as_str())
            .collect();
        assert_eq!(
            groups,
            [
                "/ { --add-header 'X-R: 1' }",
                "/admin/ { --access-log off --auth-basic Staff --allow 10.0.0.0/8 --deny all }",
                "= /old { --return '302 https://x/new' }",
                "= /gone { --return 410 }",
                "/files { --auth-basic off --limit-rate 1k --limit-rate-after 2k --expires 1h }",
            ]
        );
        // Beside another location, `location /`'s try_files and
        // add_header are its own (not the server's: nginx's other
        // locations do not have them).
        let conf = "location / { add_header X-R 1; try_files $uri =404; }
            location = /old { return 301 /new; }";
        let got = args(conf);
        assert!(
            got.windows(2).any(|w| w
                == [
                    "--location",
                    "/ { --try-files '$uri =404' --add-header 'X-R: 1' }"
                ]),
            "{got:?}"
        );
        // A `^~` alias beside a regular expression: no regex is tried
        // under it, so its files are the alias's.
        let got =
            args(r"location ^~ /static/ { alias /srv/s/; } location ~* \.css$ { expires 1d; }");
        assert_eq!(
            got[..6],
            [
                "--location",
                r"~* '\.css$' { --expires 1d }",
                "--location",
                "^~ /static/ { }",
                "--alias",
                "/static/ /srv/s"
            ]
        );
        assert!(refused(
            r"location /static/ { alias /srv/s/; } location ~* \.css$ { expires 1d; }"
        )
        .contains("(its regex location wins)"));
        // A prefix's own root: the alias of the prefix under it.
        let got = args("location /pub/ { root /srv/other/; expires 1d; }");
        assert_eq!(
            got[..4],
            [
                "--location",
                "/pub/ { --expires 1d }",
                "--alias",
                "/pub/ /srv/other/pub"
            ]
        );
        assert!(refused("location /p/ { root /a; alias /b/; }").contains("a second root or alias"));
        assert!(refused("location /p/ { root a; }").contains("give an absolute path"));
        // A realm of the server, a file of the location; each group is
        // read back by --location's own parser.
        let conf = "auth_basic Staff; location /a/ { auth_basic_user_file /u; }";
        let group = &args(conf)[1];
        assert_eq!(
            group,
            "/a/ { --auth-basic Staff --auth-basic-user-file /u }"
        );
        for g in groups.iter().copied().chain([group.as_str()]) {
            super::super::http_location::parse(g).unwrap();
        }
        assert!(got.iter().all(|a| a != "--add-header"));
    }

    #[test]
    fn nginx_org_default_conf() {
        // The default site of nginx.org's packages.
        let conf = "server {
                listen 80;
                server_name localhost;
                location / {
                    root /usr/share/nginx/html;
                    index index.html index.htm;
                }
                error_page 500 502 503 504 /50x.html;
                location = /50x.html {
                    root /usr/share/nginx/html;
                }
            }";
        let t = translate(conf, "default.conf", Path::new("/")).unwrap();
        let mut got = t.args;
        got.retain(|a| !NGINX_DEFAULTS.iter().any(|(f, v)| a == f || a == v));
        assert_eq!(
            got,
            [
                "--listen",
                "80",
                "--index",
                "index.html",
                "--index",
                "index.htm",
                "--error-page",
                "500 502 503 504 /50x.html",
                "--root",
                "/usr/share/nginx/html",
            ]
        );
        assert!(
            t.ignored
                .iter()
                .any(|i| i.starts_with("location = /50x.html (default.conf:9:")),
            "{:?}",
            t.ignored
        );
        let e = refused("root /a; location = /50x.html { root /b; }");
        assert!(e.contains("a root of its own for /50x.html"), "{e}");
    }

    #[test]
    fn secure_link_idiom() {
        let conf = r#"location /dl/ {
                secure_link $arg_md5,$arg_expires;
                secure_link_md5 "$secure_link_expires$uri secret";
                if ($secure_link = "") { return 403; }
                if ($secure_link = "0") { return 410; }
            }"#;
        assert_eq!(
            args(conf),
            [
                "--secure-link",
                "$arg_md5,$arg_expires",
                "--secure-link-md5",
                "$secure_link_expires$uri secret",
                "--secure-link-prefix",
                "/dl/",
            ]
        );
        let server =
            "secure_link $arg_h; secure_link_md5 x;\nif ($secure_link = \"\") { return 403; }\n\
                      if ($secure_link = 0) { return 410; }";
        assert_eq!(args(server)[..2], ["--secure-link", "$arg_h"]);
        assert!(!args(server).contains(&"--secure-link-prefix".to_string()));
        assert!(refused("secure_link $arg_h; secure_link_md5 x;").contains("without both"));
        assert!(refused("if ($secure_link = 0) { return 410; }").contains("without secure_link"));
        assert!(refused("location /a/ { index x; }")
            .contains("only alias, root, autoindex, the secure_link"));
    }

    #[test]
    fn listings_under_a_prefix() {
        let conf =
            "location /files/ { alias /srv/files/; autoindex on; autoindex_exact_size off; }";
        assert_eq!(
            args(conf),
            [
                "--alias",
                "/files/ /srv/files",
                "--autoindex-under",
                "/files/",
                "--autoindex-exact-size",
                "off",
            ]
        );
        let everywhere = "autoindex on; location /files/ { autoindex on; }";
        assert_eq!(args(everywhere), ["--autoindex", "on"]);
    }

    #[test]
    fn times_and_sizes() {
        assert_eq!(time("75s").as_deref(), Some("75"));
        assert_eq!(time("1h30m").as_deref(), Some("5400"));
        assert_eq!(time("500ms").as_deref(), Some("0.5"));
        assert_eq!(time("90").as_deref(), Some("90"));
        assert_eq!(time("1x"), None);
        assert_eq!(time(""), None);
        assert_eq!(size("1m"), Some(1 << 20));
        assert_eq!(size("512K"), Some(512 << 10));
        assert_eq!(size("0"), Some(0));
        assert_eq!(size("m"), None);
        assert_eq!(shell_word("a b'c"), "'a b'\\''c'");
    }

    proptest::proptest! {
        #[test]
        fn any_text_is_read_or_refused(text in "[a-z{};'\"#\\\\ \n$]{0,60}") {
            let _ = parse(&text);
            let _ = translate(&text, "t.conf", Path::new("/nonexistent"));
        }
    }
}

//! `duality http --location [=|^~|~|~*] PATH { FLAGS }`: nginx's
//! `location` blocks on the command line. The braces stand as words of
//! their own (`--location /admin/ { --auth-basic Admin }`), or the whole
//! group is one quoted word; either way the flags inside are read as the
//! server's flags of the same names are.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{CommandFactory, FromArgMatches, Parser};
use duality_http::location::Match;
use duality_http::Location;

/// The flags a location may give (the server's flags of the same names,
/// for the paths it takes).
#[derive(Parser, Debug)]
#[command(no_binary_name = true, disable_help_flag = true)]
struct LocationFlags {
    #[arg(long, value_parser = super::http::allow_rule)]
    allow: Vec<duality_http::AccessRule>,
    #[arg(long, value_parser = super::http::deny_rule)]
    deny: Vec<duality_http::AccessRule>,
    #[arg(long)]
    auth_basic: Option<String>,
    #[arg(long)]
    auth_basic_user_file: Option<PathBuf>,
    #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(["all", "any"]))]
    satisfy: Option<String>,
    #[arg(long = "return")]
    answer: Option<duality_http::Return>,
    #[arg(long, allow_hyphen_values = true)]
    expires: Vec<duality_http::fields::ExpiresRule>,
    #[arg(long)]
    add_header: Vec<duality_http::AddedField>,
    #[arg(long)]
    add_header_always: Vec<duality_http::AddedField>,
    #[arg(long, value_parser = super::http::nginx_size)]
    limit_rate: Option<u64>,
    #[arg(long, value_parser = super::http::nginx_size, requires = "limit_rate")]
    limit_rate_after: Option<u64>,
    #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(["off"]))]
    access_log: Option<String>,
    #[arg(long)]
    try_files: Option<duality_http::TryFiles>,
    #[arg(long)]
    internal: bool,
    #[arg(long)]
    error_page: Vec<duality_http::ErrorPage>,
    #[arg(long, value_parser = super::http::on_off, action = clap::ArgAction::Set)]
    gzip: Option<bool>,
    #[arg(long, value_parser = super::http::on_off, action = clap::ArgAction::Set)]
    gzip_static: Option<bool>,
    #[arg(long, value_delimiter = ' ', value_parser = super::http::gzip_type)]
    gzip_types: Option<Vec<String>>,
    #[arg(long)]
    gzip_min_length: Option<u64>,
}

/// One `--location` as given: its settings, and whether its
/// `--auth-basic` takes the server's user file.
#[derive(Debug, Clone)]
pub struct LocationArgs {
    pub location: Location,
    /// `--auth-basic REALM` without a file of its own.
    realm_alone: Option<String>,
}

impl LocationArgs {
    /// Whether it gives a realm without a file (the server's is its).
    pub fn takes_server_file(&self) -> bool {
        self.realm_alone.is_some()
    }

    /// The location, its realm given the server's user file where it
    /// named none (nginx's `auth_basic_user_file` is inherited).
    pub fn resolve(&self, server_file: Option<&PathBuf>) -> Result<Location, String> {
        let mut l = self.location.clone();
        if let Some(realm) = &self.realm_alone {
            let file = server_file.ok_or_else(|| {
                format!(
                    "--location {}: --auth-basic {realm:?} needs --auth-basic-user-file (there or the server's)",
                    l.matcher
                )
            })?;
            l.auth_basic = Some(Some((realm.clone(), file.clone())));
        }
        Ok(l)
    }
}

/// What may stand before a location's path (nginx's).
const OPERATORS: [&str; 4] = ["=", "^~", "~", "~*"];

/// `--location`'s value: `[=|^~|~|~*] PATH { FLAGS }`, words as a shell
/// splits them.
pub fn parse(v: &str) -> Result<LocationArgs, String> {
    let words = shlex::split(v).ok_or_else(|| format!("{v:?}: an unclosed quote"))?;
    let shape = || {
        format!(
            "{v:?}: give [=|^~|~|~*] PATH {{ FLAGS }}, e.g. /admin/ {{ --deny all }}, ~* \\.css$ {{ --expires 1d }}"
        )
    };
    let (matcher, rest) = match words.as_slice() {
        [op, path, rest @ ..] if OPERATORS.contains(&op.as_str()) => (format!("{op} {path}"), rest),
        [path, rest @ ..] => (path.clone(), rest),
        [] => return Err(shape()),
    };
    let matcher = Match::parse(&matcher)?;
    let flags = match rest {
        [open, flags @ .., close] if open == "{" && close == "}" => flags,
        _ => return Err(shape()),
    };
    let cmd = LocationFlags::command().name("--location");
    let m = cmd.try_get_matches_from(flags).map_err(|e| {
        // Its message, without the usage lines after it.
        let text = e.render().to_string();
        let said: Vec<&str> = text
            .lines()
            .take_while(|l| !l.trim().is_empty())
            .map(str::trim)
            .collect();
        format!(
            "{matcher}: {}",
            said.join(" ").trim_start_matches("error: ")
        )
    })?;
    let f = LocationFlags::from_arg_matches(&m).map_err(|e| format!("{matcher}: {e}"))?;
    let mut l = Location::new(matcher);
    if !f.allow.is_empty() || !f.deny.is_empty() {
        l.access = Some(super::http::ordered_rules(&f.allow, &f.deny, Some(&m)));
    }
    let mut realm_alone = None;
    match (f.auth_basic, f.auth_basic_user_file) {
        (Some(off), None) if off == "off" => l.auth_basic = Some(None),
        (Some(realm), Some(file)) => l.auth_basic = Some(Some((realm, file))),
        (Some(realm), None) => realm_alone = Some(realm),
        (None, Some(_)) => {
            return Err(format!(
                "{}: --auth-basic-user-file without --auth-basic",
                l.matcher
            ))
        }
        (None, None) => {}
    }
    l.satisfy_any = f.satisfy.map(|s| s == "any");
    l.answer = f.answer;
    if !f.expires.is_empty() {
        l.expires = Some(f.expires);
    }
    if !f.add_header.is_empty() || !f.add_header_always.is_empty() {
        let always = f.add_header_always.into_iter().map(|f| f.always());
        l.added = Some(f.add_header.into_iter().chain(always).collect());
    }
    l.limit_rate = f.limit_rate.map(|r| (r, f.limit_rate_after.unwrap_or(0)));
    l.logged = f.access_log.map(|_| false);
    l.try_files = f.try_files;
    l.internal = f.internal;
    if !f.error_page.is_empty() {
        l.error_pages = Some(f.error_page);
    }
    l.gzip = duality_http::location::GzipOverride {
        enabled: f.gzip,
        static_files: f.gzip_static,
        types: f.gzip_types.map(|t| duality_http::GzipTypes::listed(&t)),
        min_length: f.gzip_min_length,
    };
    Ok(LocationArgs {
        location: l,
        realm_alone,
    })
}

/// `words` as one `--location` value (each quoted as a shell would read
/// it back; the braces and `=` bare); `None` if a word cannot be quoted
/// (a NUL byte).
pub fn join<S: AsRef<str>>(words: &[S]) -> Option<String> {
    let mut out = Vec::with_capacity(words.len());
    for w in words {
        let w = w.as_ref();
        out.push(match w {
            "{" | "}" => w.into(),
            _ if OPERATORS.contains(&w) => w.into(),
            // Single quotes where they do (a regular expression reads as
            // written), else as shlex quotes.
            _ if !w.contains('\'') && shlex::try_quote(w).ok()? != w => format!("'{w}'").into(),
            _ => shlex::try_quote(w).ok()?,
        });
    }
    Some(out.join(" "))
}

/// `duality http … --location PATH { FLAGS } …` with each group as one
/// word after `--location` (as if quoted), so the flags inside are not
/// read as the server's; any other command line as it is. A group
/// without its closing `}` is left alone: `--location` then says how to
/// write one.
pub fn group_args(argv: Vec<OsString>) -> Vec<OsString> {
    if argv.get(1).is_none_or(|a| a != "http") {
        return argv;
    }
    let mut out = Vec::with_capacity(argv.len());
    let mut i = 0;
    while i < argv.len() {
        out.push(argv[i].clone());
        if argv[i] == "--" {
            out.extend(argv[i + 1..].iter().cloned());
            break;
        }
        let close = (argv[i] == "--location")
            .then(|| {
                // PATH { or OPERATOR PATH {
                let op = argv.get(i + 1).and_then(|a| a.to_str());
                let open = match op.is_some_and(|a| OPERATORS.contains(&a)) {
                    true => i + 3,
                    false => i + 2,
                };
                (argv.get(open)? == "{").then_some(())?;
                let close = (open + 1..argv.len()).find(|&k| argv[k] == "}")?;
                Some(close)
            })
            .flatten();
        let Some(close) = close else {
            i += 1;
            continue;
        };
        let words: Vec<String> = argv[i + 1..=close]
            .iter()
            .map(|w| w.to_string_lossy().into_owned())
            .collect();
        match join(&words) {
            Some(joined) => out.push(joined.into()),
            None => out.extend(argv[i + 1..=close].iter().cloned()),
        }
        i = close + 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grouped(args: &[&str]) -> Vec<String> {
        let argv = args.iter().map(OsString::from).collect();
        group_args(argv)
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect()
    }

    #[test]
    fn braces_make_one_word() {
        let got = grouped(&[
            "duality",
            "http",
            "--root",
            "/srv",
            "--location",
            "/a/",
            "{",
            "--add-header",
            "X-A: 1",
            "}",
            "--location",
            "=",
            "/b",
            "{",
            "}",
            "--index",
            "i.html",
        ]);
        assert_eq!(
            got,
            [
                "duality",
                "http",
                "--root",
                "/srv",
                "--location",
                "/a/ { --add-header 'X-A: 1' }",
                "--location",
                "= /b { }",
                "--index",
                "i.html"
            ]
        );
        // Unclosed, after `--`, or another command: as it is.
        for args in [
            &["duality", "http", "--location", "/a/", "{", "--deny", "all"][..],
            &["duality", "http", "--", "--location", "/a/", "{", "}"],
            &["duality", "kv", "--location", "/a/", "{", "}"],
        ] {
            assert_eq!(grouped(args), args);
        }
    }

    #[test]
    fn a_group_is_read_as_the_server_flags_are() {
        let l =
            parse("/admin/ { --allow 10.0.0.0/8 --deny all --allow 127.0.0.1 --limit-rate 1k }")
                .unwrap();
        let rules = &l.location.access.as_ref().unwrap().rules;
        assert_eq!(
            rules.iter().map(|r| r.allow).collect::<Vec<_>>(),
            [true, false, true]
        );
        assert_eq!(l.location.limit_rate, Some((1024, 0)));
        assert_eq!(l.location.matcher, Match::Prefix("/admin/".into()));
        let l =
            parse("= /x { --return '301 /y' --expires 1h --add-header-always 'X-B: 2' }").unwrap();
        assert_eq!(l.location.matcher, Match::Exact("/x".into()));
        assert!(l.location.answer.is_some());
        assert_eq!(l.location.expires.as_ref().map(Vec::len), Some(1));
        assert!(l.location.added.as_ref().unwrap()[0].always);
        assert!(l.location.access.is_none() && l.location.auth_basic.is_none());
        assert_eq!(
            parse("/a/ { --access-log off }").unwrap().location.logged,
            Some(false)
        );
        // A realm alone takes the server's file; `off` turns it off.
        let l = parse("/p/ { --auth-basic Staff }").unwrap();
        let file = PathBuf::from("/etc/users");
        let resolved = l.resolve(Some(&file)).unwrap();
        assert_eq!(resolved.auth_basic, Some(Some(("Staff".into(), file))));
        assert!(l
            .resolve(None)
            .unwrap_err()
            .contains("needs --auth-basic-user-file"));
        assert!(
            parse("= /404.html { --internal }")
                .unwrap()
                .location
                .internal
        );
        let l = parse("/open/ { --auth-basic off }").unwrap();
        assert_eq!(l.resolve(None).unwrap().auth_basic, Some(None));
    }

    #[test]
    fn what_is_refused_says_why() {
        for (v, says) in [
            ("/a/", "PATH { FLAGS }"),
            ("/a/ { --deny all", "PATH { FLAGS }"),
            ("a/ { }", "starting with /"),
            ("/a/../b/ { }", "without . or .."),
            ("/a/ { --root /x }", "/a/: unexpected argument '--root'"),
            ("/a/ { --deny nowhere }", "/a/: invalid value 'nowhere'"),
            ("/a/ { --limit-rate-after 1k }", "--limit-rate"),
            ("/a/ { --access-log /l }", "[possible values: off]"),
            ("/a/ { --auth-basic-user-file f }", "without --auth-basic"),
            ("/a/ { --add-header 'Content-Type: x' }", "Content-Type"),
            ("/a/ { --add-header 'X: \"y }", "unclosed quote"),
        ] {
            let e = parse(v).unwrap_err();
            assert!(e.contains(says), "{v}: {e}");
        }
    }
}

//! Kubernetes' URL library (`k8s.io/apiserver/pkg/cel/library/urls.go`) for the `cel` crate: `url()`
//! and `isURL()` check with Go's `ParseRequestURI`, the `kubernetes.URL` value answers `getScheme`,
//! `getHost`, `getHostname`, `getPort`, `getEscapedPath` and `getQuery` as Go's `net/url` does.

use std::collections::HashMap;

use cel::common::types::{CelBool, CelList, CelMap, CelMapKey, CelString, Type};
use cel::common::value::Val;
use cel::{DeclarationError, Env, ExecutionError};

use super::go_url::GoUrl;

/// The CEL type of URLs, named as Kubernetes names it.
static URL_TYPE: Type = Type::new_unspecified_type("kubernetes.URL");

super::cel::library_value!(GoUrl, URL_TYPE);

/// `url(string)`: an error, worded as the apiserver's, unless the string is an absolute URI or an
/// absolute path; the fragment is parsed off, as the apiserver parses again with `url.Parse`.
fn url(text: &CelString<'_>) -> Result<GoUrl, ExecutionError> {
    GoUrl::parse_request_uri(text.inner()).and_then(|_| GoUrl::parse(text.inner())).map_err(|e| {
        ExecutionError::function_error("url", format!("URL parse error during conversion from string: {e}"))
    })
}

/// `isURL(string)`: whether `url()` would accept it.
fn is_url(text: &CelString<'_>) -> CelBool {
    GoUrl::parse_request_uri(text.inner()).is_ok().into()
}

fn get_scheme(this: &GoUrl) -> CelString<'static> {
    CelString::from(this.scheme.clone())
}

fn get_host(this: &GoUrl) -> CelString<'static> {
    CelString::from(this.host.clone())
}

fn get_hostname(this: &GoUrl) -> CelString<'static> {
    CelString::from(this.hostname().to_owned())
}

fn get_port(this: &GoUrl) -> CelString<'static> {
    CelString::from(this.port().to_owned())
}

fn get_escaped_path(this: &GoUrl) -> CelString<'static> {
    CelString::from(this.escaped_path())
}

/// `getQuery()`: a `map(string, list(string))` of the query's values by key.
fn get_query(this: &GoUrl) -> CelMap<'static> {
    let entries: HashMap<CelMapKey<'static>, Box<dyn Val>> = this
        .query()
        .into_iter()
        .map(|(key, values)| {
            let values: Vec<Box<dyn Val>> =
                values.into_iter().map(|v| Box::new(CelString::from(v)) as Box<dyn Val>).collect();
            (CelMapKey::from(key), Box::new(CelList::from(values)) as Box<dyn Val>)
        })
        .collect();
    CelMap::from(entries)
}

/// Kubernetes' URL library, in every version's base environment.
pub(super) fn url_library(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_type(URL_TYPE.to_owned())?;
    cel::add_overload!(env, fn url: (CelString) -> Result<GoUrl>)?;
    cel::add_overload!(env, fn is_url: (CelString) -> CelBool, name = "isURL")?;
    cel::add_member_overload!(env, fn get_scheme: (GoUrl) -> CelString)?;
    cel::add_member_overload!(env, fn get_host: (GoUrl) -> CelString)?;
    cel::add_member_overload!(env, fn get_hostname: (GoUrl) -> CelString)?;
    cel::add_member_overload!(env, fn get_port: (GoUrl) -> CelString)?;
    cel::add_member_overload!(env, fn get_escaped_path: (GoUrl) -> CelString)?;
    cel::add_member_overload!(env, fn get_query: (GoUrl) -> CelMap)?;
    Ok(())
}

//! Plain HTTP/1.1 requests to the endpoints the tests serve (the operator's, the instance
//! managers', the simulator's forwarders), read to the end: (status, content type, body).

/// A plain HTTP/1.1 GET of `path` on `addr`, for the operator's endpoints: (status, content type,
/// body).
pub async fn http_get(addr: std::net::SocketAddr, path: &str) -> (u16, String, String) {
    try_http_get(addr, path).await.unwrap_or_else(|| panic!("GET {path} on {addr} got no HTTP answer"))
}

/// [`http_get`] that answers `None` instead of failing the test when the connection is refused
/// or closed without an answer (a Service forwarder with no ready endpoint yet).
pub async fn try_http_get(addr: std::net::SocketAddr, path: &str) -> Option<(u16, String, String)> {
    try_http_get_with(addr, path, None).await
}

/// [`http_get`] with `Authorization: Bearer <token>` when a token is given.
pub async fn http_get_as(
    addr: std::net::SocketAddr,
    path: &str,
    token: Option<&str>,
) -> (u16, String, String) {
    try_http_get_with(addr, path, token)
        .await
        .unwrap_or_else(|| panic!("GET {path} on {addr} got no HTTP answer"))
}

async fn try_http_get_with(
    addr: std::net::SocketAddr,
    path: &str,
    token: Option<&str>,
) -> Option<(u16, String, String)> {
    http_exchange(tokio::net::TcpStream::connect(addr).await.ok()?, path, token).await
}

/// One `GET path` (with a bearer `token` if given) on `stream`, read to its end: (status,
/// content type, body), or `None` if the connection ended without an answer.
pub async fn http_exchange<S>(mut stream: S, path: &str, token: Option<&str>) -> Option<(u16, String, String)>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let authorization = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    let request = format!("GET {path} HTTP/1.1\r\nHost: test\r\n{authorization}Connection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut raw = String::new();
    stream.read_to_string(&mut raw).await.ok()?;
    let (head, body) = raw.split_once("\r\n\r\n")?;
    let status = head.split(' ').nth(1)?.parse().ok()?;
    let content_type =
        head.lines().find_map(|l| l.strip_prefix("content-type: ")).unwrap_or_default().to_string();
    Some((status, content_type, body.to_string()))
}

//! Plain-HTTP calls to the admin endpoints of the processes (manager and webhook `/readyz`,
//! provider-virtual `/admin/...` and `/metrics`), which listen on loopback without TLS.

use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;

use crate::error::{E2eError, Result};

/// An answer: status code and body text.
#[derive(Debug, Clone)]
pub struct Answer {
    /// HTTP status code.
    pub status: u16,
    /// Body as text.
    pub body: String,
}

impl Answer {
    /// Whether the status is 2xx.
    pub fn ok(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

/// One request on a fresh connection (admin endpoints are called rarely).
pub async fn call(
    method: http::Method,
    address: SocketAddr,
    path: &str,
    body: Option<String>,
) -> Result<Answer> {
    let url = format!("http://{address}{path}");
    let fail = |message: String| E2eError::Http {
        method: method.to_string(),
        url: url.clone(),
        message,
    };
    let stream = tokio::net::TcpStream::connect(address)
        .await
        .map_err(|e| fail(format!("connect: {e}")))?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| fail(format!("handshake: {e}")))?;
    let driver = tokio::spawn(connection);
    let mut request = http::Request::builder()
        .method(method.clone())
        .uri(path)
        .header(http::header::HOST, address.to_string());
    if body.is_some() {
        request = request.header(http::header::CONTENT_TYPE, "application/json");
    }
    let request = request
        .body(Full::new(Bytes::from(body.unwrap_or_default())))
        .map_err(|e| fail(format!("request: {e}")))?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| fail(format!("send: {e}")))?;
    let status = response.status().as_u16();
    let bytes = response
        .into_body()
        .collect()
        .await
        .map_err(|e| fail(format!("body: {e}")))?
        .to_bytes();
    driver.abort();
    Ok(Answer {
        status,
        body: String::from_utf8_lossy(&bytes).into_owned(),
    })
}

/// `GET`, failing unless 2xx.
pub async fn get_ok(address: SocketAddr, path: &str) -> Result<String> {
    let answer = call(http::Method::GET, address, path, None).await?;
    if answer.ok() {
        Ok(answer.body)
    } else {
        Err(E2eError::Http {
            method: "GET".to_owned(),
            url: format!("http://{address}{path}"),
            message: format!("{}: {}", answer.status, answer.body),
        })
    }
}

/// The value of an OpenMetrics sample `name{labels}` (labels as written, or none) in `text`.
pub fn metric_value(text: &str, name: &str, labels: Option<&str>) -> Option<f64> {
    let wanted = match labels {
        Some(labels) => format!("{name}{{{labels}}}"),
        None => name.to_owned(),
    };
    text.lines().find_map(|line| {
        let (key, value) = line.rsplit_once(' ')?;
        (key == wanted).then(|| value.parse().ok()).flatten()
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::metric_value;

    const TEXT: &str = "# HELP mcm_machine_controller_frozen 1 if frozen\n\
        # TYPE mcm_machine_controller_frozen gauge\n\
        mcm_machine_controller_frozen 1\n\
        provider_virtual_driver_calls_total{method=\"CreateMachine\",code=\"OK\"} 3\n\
        provider_virtual_vms 2\n# EOF\n";

    #[test]
    fn reads_plain_and_labelled_samples() {
        assert_eq!(
            metric_value(TEXT, "mcm_machine_controller_frozen", None),
            Some(1.0)
        );
        assert_eq!(
            metric_value(
                TEXT,
                "provider_virtual_driver_calls_total",
                Some("method=\"CreateMachine\",code=\"OK\"")
            ),
            Some(3.0)
        );
    }

    #[test]
    fn absent_or_unlabelled_mismatch_is_none() {
        assert_eq!(metric_value(TEXT, "mcm_machine_controller", None), None);
        assert_eq!(
            metric_value(TEXT, "provider_virtual_driver_calls_total", None),
            None
        );
        assert_eq!(metric_value("garbage", "garbage", None), None);
    }
}

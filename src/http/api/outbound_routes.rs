//! Dispatch of the routes about what the daemon sends out: webhooks, restreams, and the
//! events feed and node list an operator's console follows.

use std::sync::Arc;

use hyper::body::Incoming;
use hyper::{Method, Request, Response};

use super::{feed, nodes, read_json, restreams, webhooks, Api, ApiError, Body, Route};

/// The webhook, restream, feed and node routes (a route dispatched nowhere answers 404 here,
/// which the OpenAPI test of served routes catches).
pub(super) async fn outbound(
    api: &Arc<Api>,
    route: Route,
    id: i64,
    req: Request<Incoming>,
) -> Result<Response<Body>, ApiError> {
    let method = req.method().clone();
    match (route, method) {
        (Route::Restreams, Method::GET) => restreams::list(api).await,
        (Route::Restreams, _) => restreams::create(api, read_json(req).await?).await,
        (Route::Restream, Method::GET) => restreams::get(api, id).await,
        (Route::Restream, Method::PATCH) => restreams::update(api, id, read_json(req).await?).await,
        (Route::Restream, _) => restreams::delete(api, id).await,
        (Route::Webhooks, Method::GET) => webhooks::list(api, req.uri().query()).await,
        (Route::Webhooks, _) => webhooks::create(api, read_json(req).await?).await,
        (Route::Webhook, Method::GET) => webhooks::get(api, id).await,
        (Route::Webhook, Method::PATCH) => webhooks::update(api, id, read_json(req).await?).await,
        (Route::Webhook, _) => webhooks::delete(api, id).await,
        (Route::WebhookRotateSecret, _) => webhooks::rotate_secret(api, id).await,
        (Route::WebhookDeliveries, _) => webhooks::deliveries(api, id, req.uri().query()).await,
        (Route::Events, _) => feed::open(api, req.uri().query()).await,
        (Route::Nodes, _) => nodes::list(api).await,
        _ => Err(ApiError::not_found("resource")),
    }
}

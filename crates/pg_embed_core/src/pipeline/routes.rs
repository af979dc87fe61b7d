//! A Router of Dense heads after pooling (an asymmetric dense model: sentence-transformers'
//! `Router.for_query_document`, `models.Asym` before 5.0): each route's heads, and which
//! route a call takes.
//!
//! The route is named the way `embed_sparse` names an inference-free model's: the third
//! argument of `embed(model, input, prompt_name)`. A route's name takes that route, plus the
//! prompt of the same name if the model has one, as `encode_query` / `encode_document` do
//! (task and prompt "query" / "document"). Any other name is a prompt, on the default route,
//! as `encode(prompt_name=...)`. No name: the default route, with the default prompt (as
//! `encode(...)` without a task).

use serde::{Deserialize, Serialize};

use super::Pipeline;
use crate::error::{Error, Result};
use crate::heads::Dense;
use crate::options::Options;
use crate::st::DenseRouter;

/// One route's Dense heads, in order.
#[derive(Serialize, Deserialize)]
pub(crate) struct Route {
    pub(crate) name: String,
    pub(crate) heads: Vec<Dense>,
}

/// Every route's heads (part of the weights, so of the shared prepared file).
#[derive(Serialize, Deserialize)]
pub(crate) struct Routes {
    pub(crate) routes: Vec<Route>,
    /// How many of the pipeline's shared heads run before a route's (the others after).
    pub(crate) at: usize,
    /// The width every route gives.
    pub(crate) dim: usize,
}

impl Routes {
    /// The routes of `router` read from their folders, each head checked against the
    /// width before it (`dim` in), every route ending in the same width.
    pub(crate) fn load(router: &DenseRouter, dim: usize, at: usize) -> Result<Self> {
        let mut routes = Vec::with_capacity(router.routes.len());
        for (name, folders) in &router.routes {
            let mut width = dim;
            let mut heads = Vec::with_capacity(folders.len());
            for folder in folders {
                let head = Dense::load(folder)?;
                if head.in_features != width {
                    return Err(Error::invalid_file(
                        folder.join("config.json"),
                        format!(
                            "in_features {} does not match the previous stage's output dimension {width}",
                            head.in_features
                        ),
                    ));
                }
                width = head.out_features;
                heads.push(head);
            }
            routes.push((Route { name: name.clone(), heads }, width));
        }
        let widths: Vec<usize> = routes.iter().map(|(_, w)| *w).collect();
        if widths.iter().any(|w| *w != widths[0]) {
            let listed: Vec<String> = routes.iter().map(|(r, w)| format!("{}: {w}", r.name)).collect();
            return Err(Error::Unsupported {
                what: "Router routes of different output dimensions",
                value: listed.join(", "),
                path: router.path.clone(),
                supported: "routes that give the same output dimension (a model has one: embed.models' dim)",
            });
        }
        Ok(Routes { dim: widths[0], routes: routes.into_iter().map(|(r, _)| r).collect(), at })
    }

    pub(crate) fn parameters(&self) -> usize {
        self.routes.iter().flat_map(|r| &r.heads).map(Dense::parameters).sum()
    }

    fn index(&self, name: &str) -> Option<usize> {
        self.routes.iter().position(|r| r.name == name)
    }
}

/// How a pipeline with routes picks one (the routes themselves are in its weights).
pub(crate) struct Routing {
    /// The route a call that names none takes: `options.prompt` when it names a route, else
    /// the model's default route.
    default: Option<usize>,
    /// Where `default` came from, for model_info.
    default_from: &'static str,
    class: String,
    config: std::path::PathBuf,
    legacy_asym: bool,
}

impl Routing {
    pub(crate) fn new(router: &DenseRouter, routes: &Routes, options: &Options) -> Self {
        let from_options = options.prompt.as_deref().and_then(|p| routes.index(p));
        let (default, default_from) = match from_options {
            Some(i) => (Some(i), "options (prompt)"),
            None => (router.default_route.as_deref().and_then(|r| routes.index(r)), router.default_from),
        };
        Routing {
            default,
            default_from,
            class: router.class.clone(),
            config: router.path.clone(),
            legacy_asym: router.legacy_asym,
        }
    }

    /// What `embed.model_info` shows under "router".
    pub(crate) fn describe(&self, routes: &Routes) -> serde_json::Value {
        serde_json::json!({
            "module": self.class,
            "config": self.config.display().to_string(),
            "saved_as": if self.legacy_asym { "Asym (sentence-transformers < 5)" } else { "Router" },
            "default_route": self.default.map(|i| routes.routes[i].name.clone()),
            "default_route_from": self.default_from,
            "after_heads": routes.at,
            "dim": routes.dim,
            "routes": routes.routes.iter().map(|r| serde_json::json!({
                "name": r.name,
                "heads": r.heads.iter().map(Dense::describe).collect::<Vec<_>>(),
                "dim": r.heads.last().map_or(routes.dim, |h| h.out_features),
            })).collect::<Vec<_>>(),
        })
    }
}

impl Pipeline {
    /// The route a call with `prompt_name` takes (None: the model has no routes): the route
    /// of that name, else the default route; an error when there is none.
    pub(super) fn route_of(&self, prompt_name: Option<&str>) -> Result<Option<&Route>> {
        let (Some(routes), Some(routing)) = (self.weights.routes.as_ref(), self.outputs.routing.as_ref()) else {
            return Ok(None);
        };
        let named = prompt_name.and_then(|n| routes.index(n));
        match named.or(routing.default) {
            Some(i) => Ok(Some(&routes.routes[i])),
            None => Err(Error::NoRoute {
                routes: routes.routes.iter().map(|r| r.name.as_str()).collect::<Vec<_>>().join(", "),
                asym: routing.legacy_asym,
            }),
        }
    }

    /// The LoRA task a call with `prompt_name` (else the default prompt) names, if any.
    pub(super) fn adapter_of(&self, prompt_name: Option<&str>) -> Option<&super::Adapted> {
        let adapters = &self.weights.adapters;
        if adapters.is_empty() {
            return None;
        }
        let default = self.info.default_prompt.as_deref();
        let name = prompt_name.or(default).filter(|n| !n.is_empty())?;
        crate::lora::pick(adapters, name, |a| a.name.as_str())
    }

    /// The backbone a call with `prompt_name` runs: its LoRA task's copy, else the base.
    pub(super) fn backbone_of(&self, prompt_name: Option<&str>) -> &dyn crate::models::Model {
        self.adapter_of(prompt_name).map_or(self.weights.backbone.as_ref(), |a| a.backbone.as_ref())
    }

    /// Whether `name` is one of the model's routes (a name the prompt argument may give
    /// that need not be a prompt).
    pub(super) fn is_route(&self, name: &str) -> bool {
        self.weights.routes.as_ref().is_some_and(|r| r.index(name).is_some())
    }

    /// The heads a row goes through on `route`: the shared heads before the routes, the
    /// route's, the shared heads after.
    pub(super) fn heads_of<'a>(&'a self, route: Option<&'a Route>) -> Vec<&'a Dense> {
        let heads = &self.weights.heads;
        match (route, self.weights.routes.as_ref()) {
            (Some(route), Some(routes)) => {
                let at = routes.at.min(heads.len());
                heads[..at].iter().chain(&route.heads).chain(&heads[at..]).collect()
            }
            _ => heads.iter().collect(),
        }
    }
}

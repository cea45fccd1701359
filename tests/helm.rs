//! The Helm chart, checked with the real tools: `helm lint` and `helm template` for each attach
//! mode, the rendered manifests against the Kubernetes 1.37 schemas (`kubernetes-validate
//! --strict`), the standalone Envoy config and the Istio filter through `envoy --mode validate`,
//! the rendered ConfigMap through `mom-router check-config`, and the custom resources (Envoy
//! Gateway, Istio, Prometheus Operator: no schemas for them here) field by field.
//!
//! `MOM_HELM_BIN` and `MOM_K8S_VALIDATE` come from `./scripts/test.sh` (install_helm,
//! install_kubernetes_validate).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    reason = "test helpers fail loudly"
)]

mod support;

use serde::Deserialize;
use serde_yaml::Value;
use std::path::PathBuf;
use std::process::{Command, Output};

fn tool(variable: &str, cached: &str) -> PathBuf {
    if let Ok(path) = std::env::var(variable) {
        return PathBuf::from(path);
    }
    let path = support::repo().join(".cache").join(cached);
    assert!(
        path.exists(),
        "{variable} is unset and {} is missing: run ./scripts/test.sh",
        path.display()
    );
    path
}

fn chart() -> PathBuf {
    support::repo().join("helm/mom-router")
}

fn helm(args: &[&str]) -> Output {
    Command::new(tool("MOM_HELM_BIN", "helm/helm"))
        .args(args)
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `helm template demo CHART -f VALUES [--set …]`, split into documents; panics with helm's
/// error when rendering fails.
fn render(values: &str, sets: &[&str]) -> (String, Vec<Value>) {
    let rendered = try_render(values, sets).unwrap_or_else(|e| panic!("{e}"));
    let documents = serde_yaml::Deserializer::from_str(&rendered)
        .map(|d| Value::deserialize(d).unwrap())
        .filter(|d| !d.is_null())
        .collect();
    (rendered, documents)
}

fn try_render(values: &str, sets: &[&str]) -> Result<String, String> {
    let chart = chart();
    let mut args = vec!["template", "demo", chart.to_str().unwrap()];
    // A values file of the chart's ci/ folder, or any absolute path.
    let values_path = chart.join("ci").join(values);
    if !values.is_empty() {
        args.extend(["-f", values_path.to_str().unwrap()]);
    }
    for set in sets {
        args.extend(["--set", set]);
    }
    let out = helm(&args);
    if out.status.success() {
        Ok(text(&out.stdout))
    } else {
        Err(text(&out.stderr))
    }
}

fn kinds(documents: &[Value]) -> Vec<String> {
    let mut kinds: Vec<String> = documents
        .iter()
        .map(|d| d["kind"].as_str().unwrap().to_owned())
        .collect();
    kinds.sort();
    kinds
}

fn find<'a>(documents: &'a [Value], kind: &str, name: &str) -> &'a Value {
    documents
        .iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

/// `kubernetes-validate --strict` on the rendered manifests; returns the kinds it had no schema
/// for (the custom resources), failing on any other complaint.
fn validate_against_kubernetes(rendered: &str) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rendered.yaml");
    std::fs::write(&file, rendered).unwrap();
    let out = Command::new(tool("MOM_K8S_VALIDATE", "k8s-venv/bin/kubernetes-validate"))
        .args(["--strict", "--quiet"])
        .arg(&file)
        .output()
        .unwrap();
    let report = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{report}");
    let mut unknown = Vec::new();
    for line in report.lines().filter(|l| !l.trim().is_empty()) {
        let kind = line
            .split("Couldn't find schema for kind ")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("kubernetes-validate: {line}"));
        unknown.push(kind.to_owned());
    }
    unknown.sort();
    unknown
}

fn envoy_validates(config: &str) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("envoy.yaml");
    std::fs::write(&file, config).unwrap();
    let out = Command::new(support::envoy::binary())
        .args(["--mode", "validate", "-l", "error", "-c"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
}

fn check_config(config: &str) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.yaml");
    std::fs::write(&file, config).unwrap();
    Command::new(env!("CARGO_BIN_EXE_mom-router"))
        .arg("check-config")
        .arg(&file)
        .output()
        .unwrap()
}

fn lint(values: &str) {
    let chart = chart();
    let values_path = chart.join("ci").join(values);
    let out = helm(&[
        "lint",
        "--strict",
        chart.to_str().unwrap(),
        "-f",
        values_path.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert!(text(&out.stdout).contains("0 chart(s) failed"));
}

/// What every mode shares: the Deployment's probes, security context and arguments, the
/// ConfigMap that passes check-config, and the hook Job that runs check-config first.
fn common(documents: &[Value], fullname: &str) {
    let deployment = find(documents, "Deployment", fullname);
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    let router = &pod["containers"][0];
    assert_eq!(router["name"], "mom-router");
    assert_eq!(router["readinessProbe"]["httpGet"]["path"], "/ready");
    assert_eq!(router["livenessProbe"]["httpGet"]["path"], "/live");
    assert_eq!(router["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(router["securityContext"]["allowPrivilegeEscalation"], false);
    let args: Vec<&str> = router["args"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(
        args,
        [
            "serve",
            "--config",
            "/etc/mom-router/config.yaml",
            "--grpc-listen",
            "0.0.0.0:50051",
            "--admin-listen",
            "0.0.0.0:9190",
            "--log-json",
            "--drain-grace-seconds",
            "5",
            "--drain-limit-seconds",
            "30",
            "--worker-threads",
            "2"
        ]
    );
    // The pod outlives the drain: grace plus limit plus 5 s.
    assert_eq!(pod["terminationGracePeriodSeconds"], 40);
    let service = find(documents, "Service", fullname);
    let ports: Vec<&str> = service["spec"]["ports"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(ports, ["grpc", "admin"]);

    let config = find(documents, "ConfigMap", fullname)["data"]["config.yaml"]
        .as_str()
        .unwrap();
    let checked = check_config(config);
    assert!(checked.status.success(), "{}", text(&checked.stderr));
    let hook_config = find(documents, "ConfigMap", &format!("{fullname}-check"));
    assert_eq!(hook_config["data"]["config.yaml"].as_str().unwrap(), config);
    let job = find(documents, "Job", &format!("{fullname}-check-config"));
    assert_eq!(
        job["metadata"]["annotations"]["helm.sh/hook"],
        "pre-install,pre-upgrade"
    );
    let container = &job["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["args"][0], "check-config");
    assert_eq!(job["spec"]["backoffLimit"], 0);
}

#[test]
fn the_chart_version_follows_the_crate() {
    let chart: Value =
        serde_yaml::from_str(&std::fs::read_to_string(chart().join("Chart.yaml")).unwrap())
            .unwrap();
    assert_eq!(chart["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(chart["appVersion"], env!("CARGO_PKG_VERSION"));
}

#[test]
fn standalone_renders_envoy_and_mom_router_in_one_pod() {
    lint("standalone-values.yaml");
    let (rendered, documents) = render("standalone-values.yaml", &[]);
    assert_eq!(validate_against_kubernetes(&rendered), ["ServiceMonitor"]);
    assert_eq!(
        kinds(&documents),
        [
            "ConfigMap",
            "ConfigMap",
            "ConfigMap",
            "Deployment",
            "Deployment",
            "HorizontalPodAutoscaler",
            "Job",
            "NetworkPolicy",
            "PodDisruptionBudget",
            "Service",
            "Service",
            "Service",
            "ServiceMonitor"
        ]
    );
    common(&documents, "mom-router");
    let pod = &find(&documents, "Deployment", "mom-router")["spec"]["template"]["spec"];
    assert_eq!(pod["containers"][1]["name"], "envoy");
    assert_eq!(pod["initContainers"][0]["name"], "models");
    assert_eq!(
        pod["containers"][0]["volumeMounts"][3]["mountPath"],
        "/models"
    );

    // The rendered Envoy config is valid Envoy, with a route per model and the 503 fallback.
    let envoy = find(&documents, "ConfigMap", "mom-router-envoy")["data"]["envoy.yaml"]
        .as_str()
        .unwrap();
    envoy_validates(envoy);
    let parsed: Value = serde_yaml::from_str(envoy).unwrap();
    let routes = &parsed["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]
        ["typed_config"]["route_config"]["virtual_hosts"][0]["routes"];
    let matched: Vec<&str> = routes
        .as_sequence()
        .unwrap()
        .iter()
        .filter_map(|r| r["match"]["headers"][0]["string_match"]["exact"].as_str())
        .collect();
    assert_eq!(matched, ["small", "coder"]);
    assert_eq!(routes[2]["direct_response"]["status"], 503);
    let manager = &parsed["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]
        ["typed_config"];
    // The failover filter comes first: it sees a failed response after the main filter.
    assert_eq!(manager["http_filters"][0]["name"], "mom_router_failover");
    let ext_proc = &manager["http_filters"][1]["typed_config"];
    assert_eq!(ext_proc["failure_mode_allow"], false);
    // Routing and internal headers go before a route is picked.
    let removed: Vec<&str> = manager["early_header_mutation_extensions"][0]["typed_config"]
        ["mutations"]
        .as_sequence()
        .unwrap()
        .iter()
        .filter_map(|m| m["remove"].as_str())
        .collect();
    assert_eq!(
        removed,
        ["x-selected-model", "x-mom-internal-token", "x-mom-depth"]
    );
    assert_eq!(ext_proc["processing_mode"]["request_body_mode"], "BUFFERED");
    // Metadata is forwarded to mom-router only from the namespaces the values name.
    assert!(ext_proc["metadata_options"]["forwarding_namespaces"].is_null());
    let set = "extProc.forwardMetadataNamespaces={envoy.filters.http.jwt_authn}";
    let (_, forwarding) = render("standalone-values.yaml", &[set]);
    let envoy = find(&forwarding, "ConfigMap", "mom-router-envoy")["data"]["envoy.yaml"]
        .as_str()
        .unwrap();
    envoy_validates(envoy);
    let parsed: Value = serde_yaml::from_str(envoy).unwrap();
    let forwarded = &parsed["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]
        ["typed_config"]["http_filters"][1]["typed_config"]["metadata_options"];
    assert_eq!(
        forwarded["forwarding_namespaces"]["untyped"][0],
        "envoy.filters.http.jwt_authn"
    );
    assert_eq!(
        forwarded["receiving_namespaces"]["untyped"][0],
        "mom_router"
    );

    let monitor = find(&documents, "ServiceMonitor", "mom-router");
    assert_eq!(monitor["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(monitor["spec"]["endpoints"][0]["port"], "admin");
    assert_eq!(monitor["spec"]["endpoints"][0]["path"], "/metrics");
    let redis = find(&documents, "Service", "mom-router-redis");
    assert_eq!(redis["spec"]["ports"][0]["port"], 6379);
    // Redis requires the Secret's password, which mom-router reads from MOM_REDIS_PASSWORD.
    let server = &find(&documents, "Deployment", "mom-router-redis")["spec"]["template"]["spec"]
        ["containers"][0];
    assert_eq!(server["args"][4], "--requirepass");
    assert_eq!(server["args"][5], "$(REDIS_PASSWORD)");
    assert_eq!(
        server["env"][0]["valueFrom"]["secretKeyRef"]["name"],
        "mom-router-redis"
    );
    let env = pod["containers"][0]["env"].as_sequence().unwrap();
    assert!(env.iter().any(|e| e["name"] == "MOM_REDIS_PASSWORD"
        && e["valueFrom"]["secretKeyRef"]["key"] == "password"));
    // Only this release's mom-router pods reach it.
    let policy = find(&documents, "NetworkPolicy", "mom-router-redis");
    assert_eq!(
        policy["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/component"],
        "redis"
    );
    let from = &policy["spec"]["ingress"][0]["from"][0]["podSelector"]["matchLabels"];
    assert_eq!(from["app.kubernetes.io/name"], "mom-router");
    assert_eq!(policy["spec"]["ingress"][0]["ports"][0]["port"], 6379);
}

#[test]
fn envoy_gateway_attaches_by_policy_and_routes_on_the_selected_model() {
    lint("envoy-gateway-values.yaml");
    let (rendered, documents) = render("envoy-gateway-values.yaml", &[]);
    assert_eq!(
        validate_against_kubernetes(&rendered),
        [
            "Backend",
            "ClientTrafficPolicy",
            "EnvoyExtensionPolicy",
            "HTTPRoute",
            "HTTPRouteFilter"
        ]
    );
    common(&documents, "demo-mom-router");
    let backend = find(&documents, "Backend", "demo-mom-router-ext-proc");
    assert_eq!(backend["apiVersion"], "gateway.envoyproxy.io/v1alpha1");
    assert_eq!(backend["metadata"]["namespace"], "envoy-gateway-system");
    assert_eq!(
        backend["spec"]["endpoints"][0]["fqdn"]["hostname"],
        "demo-mom-router.default.svc.cluster.local"
    );
    assert_eq!(backend["spec"]["endpoints"][0]["fqdn"]["port"], 50051);
    let policy = find(&documents, "EnvoyExtensionPolicy", "demo-mom-router");
    assert_eq!(policy["metadata"]["namespace"], "envoy-gateway-system");
    assert_eq!(policy["spec"]["targetRefs"][0]["kind"], "Gateway");
    assert_eq!(policy["spec"]["targetRefs"][0]["name"], "eg");
    let ext_proc = &policy["spec"]["extProc"][0];
    assert_eq!(ext_proc["backendRefs"][0]["kind"], "Backend");
    assert_eq!(
        ext_proc["backendRefs"][0]["name"],
        "demo-mom-router-ext-proc"
    );
    assert_eq!(ext_proc["failOpen"], false);
    assert_eq!(ext_proc["processingMode"]["request"]["body"], "Buffered");
    assert_eq!(ext_proc["processingMode"]["allowModeOverride"], true);
    let buffer = find(&documents, "ClientTrafficPolicy", "demo-mom-router-buffer");
    assert_eq!(buffer["spec"]["connection"]["bufferLimit"], 8388608);
    let route = find(&documents, "HTTPRoute", "demo-mom-router");
    assert_eq!(
        route["spec"]["parentRefs"][0]["namespace"],
        "envoy-gateway-system"
    );
    assert_eq!(route["spec"]["hostnames"][0], "llm.example.com");
    let rules = route["spec"]["rules"].as_sequence().unwrap();
    assert_eq!(rules.len(), 3);
    assert_eq!(
        rules[0]["matches"][0]["headers"][0]["name"],
        "x-selected-model"
    );
    assert_eq!(rules[0]["matches"][0]["headers"][0]["value"], "small");
    assert_eq!(rules[0]["backendRefs"][0]["name"], "small-llm");
    assert_eq!(rules[1]["matches"][0]["headers"][0]["value"], "coder");
    assert_eq!(
        rules[2]["filters"][0]["extensionRef"]["name"],
        "demo-mom-router-no-model"
    );
    let refusal = find(&documents, "HTTPRouteFilter", "demo-mom-router-no-model");
    assert_eq!(refusal["spec"]["directResponse"]["statusCode"], 503);
    // No Envoy runs in the pod in this mode.
    let pod = &find(&documents, "Deployment", "demo-mom-router")["spec"]["template"]["spec"];
    assert_eq!(pod["containers"].as_sequence().unwrap().len(), 1);
}

#[test]
fn istio_inserts_an_ext_proc_filter_envoy_accepts() {
    lint("istio-values.yaml");
    let (rendered, documents) = render("istio-values.yaml", &[]);
    assert_eq!(validate_against_kubernetes(&rendered), ["EnvoyFilter"]);
    common(&documents, "demo-mom-router");
    let filter = find(&documents, "EnvoyFilter", "demo-mom-router");
    assert_eq!(filter["apiVersion"], "networking.istio.io/v1alpha3");
    assert_eq!(filter["metadata"]["namespace"], "istio-system");
    assert_eq!(
        filter["spec"]["workloadSelector"]["labels"]["istio"],
        "ingressgateway"
    );
    let patch = &filter["spec"]["configPatches"][0];
    assert_eq!(patch["applyTo"], "HTTP_FILTER");
    assert_eq!(patch["match"]["context"], "GATEWAY");
    assert_eq!(
        patch["match"]["listener"]["filterChain"]["filter"]["subFilter"]["name"],
        "envoy.filters.http.router"
    );
    assert_eq!(patch["patch"]["operation"], "INSERT_BEFORE");
    let cluster = "outbound|50051||demo-mom-router.default.svc.cluster.local";
    let value = &patch["patch"]["value"];
    assert_eq!(
        value["typed_config"]["grpc_service"]["envoy_grpc"]["cluster_name"],
        cluster
    );
    // The inserted filter, placed in a minimal listener with that cluster, is valid Envoy.
    let envoy = format!(
        r#"static_resources:
  listeners:
    - name: gateway
      address: {{ socket_address: {{ address: 127.0.0.1, port_value: 18080 }} }}
      filter_chains:
        - filters:
            - name: envoy.filters.network.http_connection_manager
              typed_config:
                "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
                stat_prefix: gateway
                route_config: {{ name: none, virtual_hosts: [] }}
                http_filters:
                  - name: placeholder
                  - name: envoy.filters.http.router
                    typed_config:
                      "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
  clusters:
    - name: "{cluster}"
      type: STATIC
      typed_extension_protocol_options:
        envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
          "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
          explicit_http_config: {{ http2_protocol_options: {{}} }}
      load_assignment:
        cluster_name: "{cluster}"
        endpoints: [{{ lb_endpoints: [{{ endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: 50051 }} }} }} }}] }}]
"#
    );
    let mut envoy: Value = serde_yaml::from_str(&envoy).unwrap();
    envoy["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
        ["http_filters"][0] = value.clone();
    envoy_validates(&serde_yaml::to_string(&envoy).unwrap());
    assert_eq!(
        filter["spec"]["configPatches"][1]["patch"]["value"]["per_connection_buffer_limit_bytes"],
        8388608
    );
    // Model files from the claim, read-only.
    let pod = &find(&documents, "Deployment", "demo-mom-router")["spec"]["template"]["spec"];
    let models = pod["volumes"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "models")
        .unwrap();
    assert_eq!(
        models["persistentVolumeClaim"]["claimName"],
        "mom-router-models"
    );
    assert_eq!(models["persistentVolumeClaim"]["readOnly"], true);
}

#[test]
fn bad_values_fail_the_render_and_a_bad_config_fails_the_hook() {
    let failed = |sets: &[&str]| try_render("", sets).expect_err("rendered");
    assert!(failed(&["mode=gateway"])
        .contains("mode: \"gateway\" is not one of standalone, envoyGateway, istio"));
    assert!(failed(&["redis.enabled=true"])
        .contains("state.redis.url must name the Redis at demo-mom-router-redis:6379"));
    assert!(failed(&["redis.passwordSecret.name=redis-auth"]).contains(
        "with redis.passwordSecret, state.redis must say passwordEnv: MOM_REDIS_PASSWORD"
    ));
    assert!(failed(&[
        "models.persistentVolumeClaim=m",
        "models.initContainer.image=busybox"
    ])
    .contains("give persistentVolumeClaim or initContainer, not both"));
    assert!(failed(&["standalone.internalPort=10002"])
        .contains("set server.internalUrl to http://127.0.0.1:10002"));

    // A config with a typo renders (it is the user's YAML, verbatim), and the hook's
    // check-config refuses it with the path named: the release stops before any pod changes.
    let dir = tempfile::tempdir().unwrap();
    let typo = dir.path().join("typo.yaml");
    std::fs::write(
        &typo,
        "config: |\n  version: x\n  models: [{name: a, providerModle: b}]\n",
    )
    .unwrap();
    let (_, documents) = render(typo.to_str().unwrap(), &[]);
    let hook = find(&documents, "ConfigMap", "demo-mom-router-check")["data"]["config.yaml"]
        .as_str()
        .unwrap();
    let checked = check_config(hook);
    assert_eq!(checked.status.code(), Some(1));
    assert!(
        text(&checked.stderr).contains("models[0]"),
        "{}",
        text(&checked.stderr)
    );
}

#[test]
fn a_config_change_rolls_the_pods_unless_hot_reload_is_chosen() {
    let annotation = |sets: &[&str]| {
        let (_, documents) = render("", sets);
        find(&documents, "Deployment", "demo-mom-router")["spec"]["template"]["metadata"]
            ["annotations"]["checksum/config"]
            .as_str()
            .map(str::to_owned)
    };
    let default = annotation(&[]).unwrap();
    let other = annotation(&["config=version: other\n"]).unwrap();
    assert_eq!(default.len(), 64);
    assert_ne!(default, other);
    assert_eq!(annotation(&["rollOnConfigChange=false"]), None);
}

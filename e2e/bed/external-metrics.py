#!/usr/bin/env python3
"""The bed's external metrics API: serves `external.metrics.k8s.io/v1beta1` over TLS, as a metrics
adapter (prometheus-adapter, KEDA) does, so that the controller-manager's HorizontalPodAutoscaler
controller reads External metrics through the API server's aggregation layer.

Each metric is a file in the values directory: its name is the metric's name, its content a
Kubernetes quantity (`3`, `250m`). A test sets a metric by writing its file; a metric without a
file is NotFound. The value is the same in every namespace and for every label selector.

Started by cluster-up.sh on a non-loopback address of the host (the API server does not proxy to
loopback endpoints), registered there by an APIService, a Service without selector and an
EndpointSlice; stopped by cluster-down.sh.
"""

import argparse
import datetime
import json
import os
import re
import ssl
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

GROUP = "external.metrics.k8s.io"
VERSION = "v1beta1"
GROUP_VERSION = f"{GROUP}/{VERSION}"
METRIC_PATH = re.compile(rf"^/apis/{GROUP_VERSION}/namespaces/([^/]+)/([^/]+)$")
NAME = re.compile(r"^[A-Za-z0-9_.:-]+$")


def metric_names(values):
    try:
        return sorted(n for n in os.listdir(values) if NAME.match(n))
    except FileNotFoundError:
        return []


def status(code, reason, message):
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


class Handler(BaseHTTPRequestHandler):
    values = "."

    def answer(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):  # noqa: N802 (the http.server name)
        path = self.path.split("?", 1)[0].rstrip("/")
        if path in ("/healthz", "/readyz", "/livez"):
            return self.answer(200, {"status": "ok"})
        if path == "/apis":
            return self.answer(200, {
                "kind": "APIGroupList",
                "apiVersion": "v1",
                "groups": [{
                    "name": GROUP,
                    "versions": [{"groupVersion": GROUP_VERSION, "version": VERSION}],
                    "preferredVersion": {"groupVersion": GROUP_VERSION, "version": VERSION},
                }],
            })
        if path == f"/apis/{GROUP_VERSION}":
            return self.answer(200, {
                "kind": "APIResourceList",
                "apiVersion": "v1",
                "groupVersion": GROUP_VERSION,
                "resources": [
                    {"name": n, "singularName": "", "namespaced": True,
                     "kind": "ExternalMetricValueList", "verbs": ["get"]}
                    for n in metric_names(self.values)
                ],
            })
        found = METRIC_PATH.match(path)
        if not found:
            return self.answer(404, status(404, "NotFound", f"{path} is not served here"))
        metric = found.group(2)
        file = os.path.join(self.values, metric)
        if not NAME.match(metric) or not os.path.isfile(file):
            return self.answer(404, status(404, "NotFound", f"external metric {metric} has no value"))
        with open(file, encoding="utf-8") as f:
            value = f.read().strip()
        now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        return self.answer(200, {
            "kind": "ExternalMetricValueList",
            "apiVersion": GROUP_VERSION,
            "metadata": {},
            "items": [{"metricName": metric, "metricLabels": {}, "timestamp": now, "value": value}],
        })

    def log_message(self, fmt, *args):
        print(f"{self.address_string()} {fmt % args}", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--cert", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--values", required=True, help="directory of metric value files")
    args = parser.parse_args()
    os.makedirs(args.values, exist_ok=True)
    Handler.values = args.values
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(args.cert, args.key)
    server = ThreadingHTTPServer((args.host, args.port), Handler)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    print(f"serving {GROUP_VERSION} on https://{args.host}:{args.port}, values from {args.values}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()

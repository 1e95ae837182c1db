//go:build tools

// Package kube pins the Kubernetes control plane that weft's local cluster
// and tests run. It has no code of its own: the imports below put the
// commands' packages in this module's build list, so that
// `go build k8s.io/kubernetes/cmd/...` from this directory builds them at the
// versions go.mod records. localcluster/build-kube.sh is the builder.
package kube

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
	_ "k8s.io/kubernetes/cmd/kubectl"
)

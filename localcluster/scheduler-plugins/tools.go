//go:build tools

// Package sp pins sigs.k8s.io/scheduler-plugins so that
// `go build sigs.k8s.io/scheduler-plugins/cmd/scheduler` from this directory
// builds its kube-scheduler (with Coscheduling) at the version go.mod records.
package sp

import _ "sigs.k8s.io/scheduler-plugins/cmd/scheduler"

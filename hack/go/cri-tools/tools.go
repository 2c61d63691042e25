//go:build tools

// Package tools is never built: its imports are what the test-only package
// sigs.k8s.io/cri-tools/cmd/critest imports, so that `go mod tidy` keeps them
// in go.mod and go.sum for `go test -c sigs.k8s.io/cri-tools/cmd/critest`.
package tools

import (
	_ "github.com/onsi/ginkgo/v2"
	_ "github.com/onsi/ginkgo/v2/types"
	_ "github.com/onsi/gomega"
	_ "sigs.k8s.io/cri-tools/pkg/benchmark"
	_ "sigs.k8s.io/cri-tools/pkg/common"
	_ "sigs.k8s.io/cri-tools/pkg/framework"
	_ "sigs.k8s.io/cri-tools/pkg/validate"
	_ "sigs.k8s.io/cri-tools/pkg/version"
)

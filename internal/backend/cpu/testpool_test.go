package cpu

import (
	"fmt"
	"os"
	"testing"
)

// testKernelSet is the kernel set the package's tests run their pools on: the one the
// environment variable KVASIR_CPU names (the test script runs the package a second time
// with KVASIR_CPU=generic), the fastest when it is unset.
func testKernelSet() string { return os.Getenv("KVASIR_CPU") }

// TestMain refuses a KVASIR_CPU that names no kernel set of this CPU before any test runs.
func TestMain(m *testing.M) {
	if _, err := kernelsByName(testKernelSet()); err != nil {
		fmt.Fprintf(os.Stderr, "KVASIR_CPU: %v\n", err)
		os.Exit(2)
	}
	os.Exit(m.Run())
}

// testPool starts a pool of threads workers on the tests' kernel set (testKernelSet).
func testPool(threads int) *Pool {
	p, err := NewPoolKernels(threads, testKernelSet())
	if err != nil {
		panic(err) // checked by TestMain
	}
	return p
}

//go:build !linux

package chat

// limitAddressSpace does nothing where there is no address-space limit to set: there the
// worker's heap is bounded by its soft memory limit and the render deadline alone.
func limitAddressSpace(extra int64) error { return nil }

//go:build !linux

package cpu

// adviseHugePages does nothing where transparent huge pages cannot be asked for.
func adviseHugePages(b []byte) {}

// adviseSmallPages does nothing where transparent huge pages cannot be asked for.
func adviseSmallPages(b []byte) {}

// memAvailable reports that the available memory is not known here.
func memAvailable() (int64, bool) { return 0, false }

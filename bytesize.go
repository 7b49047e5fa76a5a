package kvasir

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// byteUnits are the units ParseBytes reads, longest suffixes first so that "mib" is not
// read as "b".
var byteUnits = []struct {
	suffix string
	mult   float64
}{
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"tib", 1 << 40},
	{"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9}, {"tb", 1e12},
	{"k", 1 << 10}, {"m", 1 << 20}, {"g", 1 << 30}, {"t", 1 << 40}, {"b", 1},
}

// ParseBytes reads a size in bytes such as "1073741824", "512MiB", "2GiB", "1GB", "1.5g"
// or "64k" (units are case-insensitive; k, m, g and t are powers of 1024); "" is 0. It is
// how every command reads --kv-cache-memory.
func ParseBytes(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, nil
	}
	num, mult := strings.ToLower(s), 1.0
	for _, u := range byteUnits {
		if rest, ok := strings.CutSuffix(num, u.suffix); ok {
			num, mult = strings.TrimSpace(rest), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || v < 0 || math.IsNaN(v) || math.IsInf(v, 0) || v*mult >= math.MaxInt64 {
		return 0, fmt.Errorf("%q is not a size (bytes, or with a unit such as 512MiB or 2GiB)", s)
	}
	return int64(v * mult), nil
}

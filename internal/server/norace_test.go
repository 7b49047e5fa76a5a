//go:build !race

package server

// raceSlowdown scales the time limits of timing tests under the race detector (1 without it).
const raceSlowdown = 1

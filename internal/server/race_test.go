//go:build race

package server

// raceSlowdown scales the time bounds of tests under the race detector, which slows the
// code it instruments several times over.
const raceSlowdown = 10

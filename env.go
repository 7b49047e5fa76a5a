package kvasir

import "os"

// The environment variables that override Options, read here and nowhere else (Load
// applies them to every model it binds):
//
//	KVASIR_CPU=NAME         Options.CPUKernels = NAME ("generic": the pure-Go kernels)
//	KVASIR_CPU_WEIGHTS=mmap Options.CPUWeightsInPlace
//	KVASIR_CUDA_OPTIME=1    Options.CUDA.OpTime
//	KVASIR_CUDA_PDL=0       Options.CUDA.DisablePDL
//	KVASIR_CUDA_SHADOW=0    Options.CUDA.DisableShadows
//	KVASIR_CUDA_QUANT=0     Options.CUDA.WidenQuantized
//	KVASIR_CUDA_REPACK=0    Options.CUDA.KeepGGMLLayout
//	KVASIR_CUDA_GEMVQ=NAME  Options.CUDA.QuantGEMV
const (
	EnvCPUKernels = "KVASIR_CPU"
	EnvCPUWeights = "KVASIR_CPU_WEIGHTS"
	EnvCUDAOpTime = "KVASIR_CUDA_OPTIME"
	EnvCUDAPDL    = "KVASIR_CUDA_PDL"
	EnvCUDAShadow = "KVASIR_CUDA_SHADOW"
	EnvCUDAQuant  = "KVASIR_CUDA_QUANT"
	EnvCUDAGEMVQ  = "KVASIR_CUDA_GEMVQ"
	EnvCUDARepack = "KVASIR_CUDA_REPACK"
)

// withEnv returns opt with the overrides getenv reports (os.Getenv in Load).
func withEnv(opt Options, getenv func(string) string) Options {
	if k := getenv(EnvCPUKernels); k != "" {
		opt.CPUKernels = k
	}
	if getenv(EnvCPUWeights) == "mmap" {
		opt.CPUWeightsInPlace = true
	}
	if getenv(EnvCUDAOpTime) == "1" {
		opt.CUDA.OpTime = true
	}
	if getenv(EnvCUDAPDL) == "0" {
		opt.CUDA.DisablePDL = true
	}
	if getenv(EnvCUDAShadow) == "0" {
		opt.CUDA.DisableShadows = true
	}
	if getenv(EnvCUDAQuant) == "0" {
		opt.CUDA.WidenQuantized = true
	}
	if getenv(EnvCUDARepack) == "0" {
		opt.CUDA.KeepGGMLLayout = true
	}
	if l := getenv(EnvCUDAGEMVQ); l != "" {
		opt.CUDA.QuantGEMV = l
	}
	return opt
}

// envOverrides is withEnv on the process environment.
func envOverrides(opt Options) Options { return withEnv(opt, os.Getenv) }

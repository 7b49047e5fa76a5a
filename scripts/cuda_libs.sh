# Sourced by the GPU scripts (gpu_test.sh, torch_arch.sh): puts the directories that hold
# NVRTC, cuBLAS, NCCL and cuSPARSELt on LD_LIBRARY_PATH, and sets have_nccl=1 when NCCL is
# found. They may live outside the loader's path: in the CUDA toolkit or in Python wheels
# (nvidia-cuda-nvrtc, nvidia-cublas, nvidia-nccl-cu*, nvidia-cusparselt-cu*, whose library
# is in site-packages/nvidia/cusparselt/lib). Add the directories that hold them.
libdirs=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
	[ -d "$d" ] && libdirs="$libdirs:$d"
done
have_nccl=0
for pat in 'libnvrtc.so.1[23]' 'libcublas.so.1[23]' 'libnccl.so.2' 'libcusparseLt.so.0'; do
	if ldconfig -p 2>/dev/null | grep -q "$pat"; then
		[ "$pat" = libnccl.so.2 ] && have_nccl=1
		continue
	fi
	f=$(find /usr/local /opt /usr/lib -maxdepth 9 -name "$pat" 2>/dev/null | head -1)
	[ -n "$f" ] || continue
	libdirs="$libdirs:$(dirname "$f")"
	[ "$pat" = libnccl.so.2 ] && have_nccl=1
done
# A wheel's cuSPARSELt in a Python environment outside those folders (a virtualenv).
if ! ldconfig -p 2>/dev/null | grep -q libcusparseLt.so.0 && command -v python3 >/dev/null; then
	for d in $(python3 -c 'import site; print(" ".join(site.getsitepackages() + [site.getusersitepackages()]))' 2>/dev/null); do
		if [ -e "$d/nvidia/cusparselt/lib/libcusparseLt.so.0" ]; then
			case ":$libdirs:" in *":$d/nvidia/cusparselt/lib:"*) ;; *) libdirs="$libdirs:$d/nvidia/cusparselt/lib" ;; esac
			break
		fi
	done
fi
# With libnccl found, the NCCL tests must run rather than skip. (The NCCL environment,
# NVLink multicast settings included, is left as the machine sets it.)
[ "$have_nccl" = 1 ] && export KVASIR_REQUIRE_NCCL=${KVASIR_REQUIRE_NCCL:-1}
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}$libdirs"
echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"

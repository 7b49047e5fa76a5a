package cuda

import "testing"

// TestDeviceOptions: the device settings that were environment variables reach the device
// through DeviceOptions: op timing, and programmatic dependent launch (on where the driver
// and the GPU have it, unless turned off).
func TestDeviceOptions(t *testing.T) {
	drv, _ := gpuDriver(t)
	open := func(opt DeviceOptions) *Device {
		dv, err := drv.OpenDevice(0, opt)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { dv.Close() })
		return dv
	}
	plain := open(DeviceOptions{})
	wantPDL := plain.drv.cuLaunchKernelEx != nil && plain.Info().Major >= 9
	if plain.pdl != wantPDL || plain.times != nil {
		t.Errorf("default device on %s: PDL %v (want %v), op profile %v", plain.Info().Arch(), plain.pdl, wantPDL, plain.times != nil)
	}
	knobs := open(DeviceOptions{OpTime: true, DisablePDL: true})
	if knobs.pdl || knobs.times == nil {
		t.Errorf("OpTime, DisablePDL: PDL %v, op profile %v", knobs.pdl, knobs.times != nil)
	}
}

import os

# Tests see several CPU devices so sharded kernels are exercised as on a mesh.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")

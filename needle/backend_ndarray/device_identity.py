"""The identity of a device, apart from its storage (so NDArray can check a
device without importing the devices, which import NDArray)."""
from __future__ import annotations


class DeviceIdentity:
    """What makes a device a device: its name (equal names, equal devices).
    NDArray checks devices against this class; needle.backend_ndarray.devices
    builds the storage and kernels on it."""

    name = "device"

    def __repr__(self) -> str:
        return self.name + "()"

    def __eq__(self, other) -> bool:
        return isinstance(other, DeviceIdentity) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)

    def enabled(self) -> bool:
        return True

"""Resident memory of this process, for the examples' figures."""


def resident_mb() -> tuple[float, float]:
    """`(VmRSS, VmHWM)` of this process in MB."""
    fields = {}
    with open("/proc/self/status") as status:
        for line in status:
            name, _, value = line.partition(":")
            fields[name] = value.split()
    return float(fields["VmRSS"][0]) / 1024, float(fields["VmHWM"][0]) / 1024

"""The bench's generic provider names, importable without torch (``tritonkit bench --help`` shows them)."""

#: the providers every op has, in the order the bench lists them
GENERIC_PROVIDERS = ("tritonkit", "eager", "inductor", "inductor-dynamic")
#: providers timed only when asked for
NOT_DEFAULT = ("inductor-dynamic",)

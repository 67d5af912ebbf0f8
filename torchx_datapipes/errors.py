"""The package's own failures. Each message names the bad value and the fix."""


class DatapipesError(Exception):
    """Base class for torchx_datapipes errors."""


class ArtifactError(DatapipesError):
    """An artifact could not be packaged or loaded."""


class ArtifactNotFoundError(ArtifactError, FileNotFoundError):
    def __init__(self, url: str) -> None:
        self.url = url
        super().__init__(
            f"artifact not found: {url}. Check the URL; jobs on remote schedulers (kubernetes, slurm, ...)"
            " need a store every node can read, such as s3://bucket/prefix (--artifact_store)."
        )

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (type(self), (self.url,))


class ArtifactIntegrityError(ArtifactError):
    def __init__(self, url: str, expected: str, actual: str) -> None:
        self.url, self.expected, self.actual = url, expected, actual
        super().__init__(
            f"artifact {url} failed its integrity check: expected sha256 {expected}, got {actual}."
            " The stored bytes were modified or truncated; re-package the function."
        )

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (type(self), (self.url, self.expected, self.actual))


class ArtifactVersionError(ArtifactError):
    """Python/cloudpickle versions of the artifact and the loader differ."""


class NotSerializableError(ArtifactError):
    """The callable captures something that cannot be pickled."""


class InputError(DatapipesError, ValueError):
    """Bad input data: the message names file, line, field and value."""


class OutputExistsError(DatapipesError, FileExistsError):
    """The output already holds a committed result."""

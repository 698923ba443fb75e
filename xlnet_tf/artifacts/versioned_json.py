"""`VersionedJson`: one JSON file kind the project writes and reads back, with its schema name and version.

Every such file opens with `"schema"` and `"version"`. Before 1.0 each kind has one version: a file of another
version (or without the header) is refused, naming the file and what to re-run, rather than read with guessed
defaults. Writes are atomic (xlnet_tf/files.py); paths may be local or `gs://`.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Dict, Type

from xlnet_tf import files
from xlnet_tf.errors import UserError


@dataclasses.dataclass(frozen=True)
class VersionedJson:
    """schema: the kind's name (`xlnet_tf.artifacts.export_info`); version: the one this code writes and reads; rerun: what
    makes a file of this version again (said when an older or newer one is found); error: the UserError raised."""

    schema: str
    version: int
    rerun: str
    error: Type[UserError] = UserError

    def to_json(self, values: Dict[str, Any]) -> Dict[str, Any]:
        """`values` under the schema header, as written."""
        return {"schema": self.schema, "version": self.version, **values}

    def fields(self, values: Any, where: str) -> Dict[str, Any]:
        """The fields of a file's content read from `where` (the header checked and removed)."""
        if not isinstance(values, dict):
            raise self.error(f"{where}: not a JSON object")
        values = dict(values)
        schema, version = values.pop("schema", None), values.pop("version", None)
        if schema is None:
            raise self.error(f"{where}: no schema header (written by an earlier version or another tool); "
                             f"{self.rerun}")
        if schema != self.schema:
            raise self.error(f"{where}: schema {schema!r} is not {self.schema!r}: it was not written by this "
                             f"project's {self.schema.rsplit('.', 1)[-1]} writer")
        if version != self.version:
            raise self.error(f"{where}: {self.schema} version {version!r}, this code reads version {self.version} "
                             f"only (written by another version); {self.rerun}")
        return values

    def write(self, path: str, values: Dict[str, Any]) -> None:
        files.write_json_atomic(path, self.to_json(values))

    def read(self, path: str) -> Dict[str, Any]:
        """The fields of the file at `path`; `error` naming it when it is unreadable or of another kind or
        version."""
        try:
            with files.open_file(path, "r") as f:
                values = json.loads(f.read())
        except Exception as e:  # OSError, ValueError, tf.errors.OpError
            raise self.error(f"{path} is unreadable ({' '.join(str(e).split())})") from None
        return self.fields(values, path)

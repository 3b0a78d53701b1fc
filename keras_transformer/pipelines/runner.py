"""What both pipelines share: Beam's pipeline options from the command line,
and an output folder that appears whole or not at all."""

import contextlib
import os

from keras_transformer import startup
from keras_transformer.textfiles import check_output, replace_folder

DEFAULT_RUNNER = "FnApiRunner"
"""The runner when the command line names none. Beam 2.77's `DirectRunner`
first tries its "Prism" runner, a binary it downloads from GitHub, and falls
back to this one; the FnApiRunner needs no network and runs in this process,
or in N worker processes with `--direct_running_mode=multi_processing
--direct_num_workers=N`."""


def require_beam():
    """The `apache_beam` module, or a one-line ImportError saying how to get
    it; imported, the first time, without the warning it logs where Google
    Cloud's client is not installed (`startup.root_logger_to_errors`)."""
    try:
        with startup.root_logger_to_errors():
            import apache_beam
    except ImportError:
        raise ImportError("Apache Beam is not installed: pip install 'keras-transformer[beam]'.") \
            from None
    return apache_beam


def pipeline_options(beam_args):
    """Beam's `PipelineOptions` from the arguments a command did not know
    (`--runner`, `--project`, `--flink_master`, `--direct_num_workers`, ...).

    Raises:
        ValueError: an argument Beam does not know either (a misspelt option
            of the command would otherwise be dropped with a log line).
    """
    require_beam()
    from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

    beam_args = list(beam_args)
    options = PipelineOptions(beam_args)
    unknown = set(options.get_all_options(retain_unknown_options=True)) - set(options.get_all_options())
    named = []  # the unknown options as given, with their values; and stray words
    for index, argument in enumerate(beam_args):
        before = beam_args[index - 1] if index else ""
        value_of = before.startswith("--") and "=" not in before
        if argument.startswith("--") and argument[2:].split("=")[0] in unknown:
            named.append(argument)
        elif not argument.startswith("-") and (
                not value_of or before[2:] in unknown):
            named.append(argument)
    if named:
        raise ValueError(f"unrecognized arguments: {' '.join(named)} (neither this command's nor "
                         "an Apache Beam pipeline option)")
    standard = options.view_as(StandardOptions)
    if not standard.runner:
        standard.runner = DEFAULT_RUNNER
    return options


def is_remote(path):
    """Whether `path` is in a remote file system (gs://, s3://, hdfs://, ...)."""
    return "://" in os.fspath(path)


def check_output_folder(path, overwrite, marker):
    """Refuses, before any work, an output folder that holds a finished job
    (its `marker` file) unless `overwrite`; a local one also as
    `textfiles.check_output` does."""
    if not is_remote(path):
        return check_output(path, overwrite, folder=True)
    from apache_beam.io.filesystems import FileSystems

    if FileSystems.exists(FileSystems.join(path, marker)) and not overwrite:
        raise FileExistsError(f"{path} holds a finished job ({marker}); pass --overwrite to "
                              "replace it, or choose another output folder.")
    return path


@contextlib.contextmanager
def output_folder(path, marker):
    """Yields the folder a pipeline writes into. A local output is written
    into a temporary folder beside `path`, which replaces `path` only when
    the block ends normally (`textfiles.replace_folder`): a killed or failed
    run leaves no partial output, and running the same command again
    produces it whole. A remote output is written in place: Beam's sinks
    move their files into place only when the job succeeds, and the job
    writes `marker` last; an earlier `marker` is deleted first."""
    if not is_remote(path):
        with replace_folder(path) as scratch:
            yield scratch
        return
    from apache_beam.io.filesystems import FileSystems

    finished = FileSystems.join(path, marker)
    if FileSystems.exists(finished):
        FileSystems.delete([finished])
    yield path

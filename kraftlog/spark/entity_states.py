"""Entity states in Spark: the whole value of every entity after every record that touches it.

Each builder returns *state rows*: ``cluster_id``, the kind's key columns, ``eff_offset``,
``eff_ts``, ``seq`` (see ``kraftlog.spark.replay``), ``exists`` and the kind's value columns (null
when the entity does not exist). They follow Kafka's replay rules (FACTS d.2) with window functions
over the records of each entity, never a loop:

* a record that replaces an entity starts a **generation** (``gen`` = running count of replacing and
  deleting records); a partial update applies only inside a generation whose head created the entity
  (and, for brokers, carries the same broker epoch);
* a field a partial update leaves null keeps its value: ``last(value, ignorenulls)`` over the
  generation;
* counted quantities (partition and leader epochs) are the head's value plus a running count;
* state Kafka reads from elsewhere (the topic a PartitionRecord belongs to, the name RemoveTopic
  deletes configs of, the topics a ClearElr names) comes from an as-of join on the topic states.

``versions`` turns state rows into history rows; ``kraftlog.state.history`` is the sequential
reference with the same rules.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import DataType

from kraftlog.spark.replay import EFFECTIVE, Applied
from kraftlog.spark.store import spark_schema
from kraftlog.state.entities import BY_NAME, MIGRATING, UNASSIGNED, EntityKind
from kraftlog.tables.definitions import RECORD_KEY

RUNNING = (Window.unboundedPreceding, Window.currentRow)


def _types(kind: EntityKind) -> dict[str, DataType]:
    return {f.name: f.dataType for f in spark_schema(kind.history_table()).fields}


def state(df: DataFrame, kind: str, exists: Column | bool, keys: Mapping[str, Column],
          values: Mapping[str, Column] | None = None) -> DataFrame:
    """State rows of ``kind`` (values not given are null, as for a deleted entity)."""
    k = BY_NAME[kind]
    t = _types(k)
    given = values or {}
    present = F.lit(exists) if isinstance(exists, bool) else exists
    return df.select(
        F.col("cluster_id"),
        *[keys[c].cast(t[c]).alias(c) for c in k.key_names],
        *EFFECTIVE,
        present.alias("exists"),
        *[F.when(present, given[c] if c in given else F.lit(None)).cast(t[c]).alias(c) for c in k.value_names],
    )


def versions(states: DataFrame, kind: str) -> DataFrame:
    """History rows (``<kind>_history``) from state rows."""
    k = BY_NAME[kind]
    keys = ["cluster_id", *k.key_names]
    w = Window.partitionBy(*keys).orderBy("eff_offset", "seq")
    value = F.struct("exists", *k.value_names)
    prev = F.lag(value).over(w)
    nxt = F.lead(F.struct("eff_offset", "eff_ts", "exists")).over(w)
    return (states
            # the changes of one entity at one effective offset collapse to the last
            .withColumn("_last", F.coalesce(F.lead("eff_offset").over(w) != F.col("eff_offset"), F.lit(True)))
            .filter("_last")
            # a change that leaves the entity as it was is no version
            .withColumn("_changed", F.when(prev.isNull(), F.col("exists")).otherwise(~value.eqNullSafe(prev)))
            .filter("_changed")
            .withColumn("_next", nxt)
            .filter("exists")
            .select(*keys, *k.value_names,
                    F.col("eff_offset").alias("valid_from_offset"),
                    F.col("_next.eff_offset").alias("valid_to_offset"),
                    F.col("eff_ts").alias("valid_from"),
                    F.col("_next.eff_ts").alias("valid_to"),
                    F.when(F.col("_next").isNull(), F.lit(None))
                    .when(F.col("_next.exists"), F.lit("update")).otherwise(F.lit("delete")).alias("ended_by")))


def as_of(probe: DataFrame, states: DataFrame, on: list[str], values: list[str]) -> DataFrame:
    """``probe`` rows with ``_prior``: the state (exists, values) of entity ``on`` just before each probe.

    Probe rows must be unique by (cluster_id, on..., eff_offset, seq).
    """
    s = states.select(F.col("cluster_id").alias("_c"), *[F.col(c).alias(f"_k_{c}") for c in on],
                      F.col("eff_offset").alias("_e"), F.col("seq").alias("_q"),
                      F.struct("exists", *values).alias("_prior"))
    before = (s["_e"] < probe["eff_offset"]) | ((s["_e"] == probe["eff_offset"]) & (s["_q"] < probe["seq"]))
    cond = [probe["cluster_id"] == s["_c"], *[probe[c] == s[f"_k_{c}"] for c in on], before]
    w = Window.partitionBy("cluster_id", *on, "eff_offset", "seq").orderBy(F.col("_e").desc_nulls_last(),
                                                                          F.col("_q").desc_nulls_last())
    return (probe.join(s, cond, "left").withColumn("_rn", F.row_number().over(w)).filter("_rn = 1")
            .drop("_rn", "_c", "_e", "_q", *[f"_k_{c}" for c in on]))


def _sorted(c: str | Column, t: DataType) -> Column:
    """A list sorted (listeners and features by name; their names are unique), [] for null."""
    return F.array_sort(F.coalesce(F.col(c) if isinstance(c, str) else c, F.array().cast(t)))


def _lookup(mapping: Mapping[str, str], key: Column) -> Column:
    pairs = [F.lit(x) for kv in sorted(mapping.items()) for x in kv]
    return F.try_element_at(F.create_map(*pairs), key.cast("string"))


class Inputs:
    """What the builders read: applied typed rows, the records table and the enum names."""

    def __init__(self, applied: Applied, enums: Mapping[str, Mapping[str, str]]):
        self.applied = applied
        self.enums = enums
        self._topics: DataFrame | None = None
        self._cached: list[DataFrame] = []

    def rows(self, name: str, control: bool = False) -> DataFrame:
        return self.applied.rows(name, control)

    def with_value_hash(self, name: str) -> DataFrame:
        """Rows of typed table ``name`` with the ``value_hash`` of their record."""
        typed = self.applied.table(name)
        recs = self.applied.table("records").select(*[F.col(c).alias(f"_r_{c}") for c in RECORD_KEY], "value_hash")
        cond = [typed[c].eqNullSafe(recs[f"_r_{c}"]) for c in RECORD_KEY]
        return self.applied.apply(typed.join(recs, cond).drop(*[f"_r_{c}" for c in RECORD_KEY]))

    def cache(self, df: DataFrame) -> DataFrame:
        """``df`` persisted until ``release`` (for frames read more than once)."""
        df = df.persist(StorageLevel.MEMORY_AND_DISK)
        self._cached.append(df)
        return df

    @property
    def topic_states(self) -> DataFrame:
        """Topic state rows (cached: partitions and configs look topics up)."""
        if self._topics is None:
            self._topics = self.cache(_topics(self))
        return self._topics

    @property
    def topic_events(self) -> DataFrame:
        return self.topic_states.select("cluster_id", "topic_id", *EFFECTIVE)

    def release(self) -> None:
        for df in self._cached:
            df.unpersist()
        self._cached.clear()


# -- simple kinds: each record sets or deletes one entity ------------------------------------------------

def _controllers(x: Inputs) -> DataFrame:
    t = _types(BY_NAME["controllers"])
    reg = x.rows("register_controller_record")
    key = {"controller_id": F.col("controller_id")}
    return state(reg, "controllers", True, key, {
        "incarnation_id": F.col("incarnation_id"), "zk_migration_ready": F.col("zk_migration_ready"),
        "listeners": _sorted("end_points", t["listeners"]), "supported_features": _sorted("features",
                                                                                          t["supported_features"])}
    ).unionByName(state(x.rows("unregister_controller_record"), "controllers", False, key))


def _topics(x: Inputs) -> DataFrame:
    key = {"topic_id": F.col("topic_id")}
    return state(x.rows("topic_record"), "topics", True, key, {"name": F.col("name")}).unionByName(
        state(x.rows("remove_topic_record"), "topics", False, key))


def _configs(x: Inputs) -> DataFrame:
    rec = x.rows("config_record")
    key = {c: F.col(c) for c in ("resource_type", "resource_name", "name")}
    sets = state(rec, "configs", F.col("value").isNotNull(), key, {"value": F.col("value")})
    # RemoveTopic deletes every TOPIC config of the name the topic had
    removed = as_of(x.rows("remove_topic_record").select("cluster_id", "topic_id", *EFFECTIVE), x.topic_states,
                    ["topic_id"], ["name"]).filter(F.col("_prior.exists"))
    topic_keys = rec.filter(F.col("resource_type") == 2).select("cluster_id", "resource_name", "name").distinct()
    deletes = removed.select("cluster_id", *EFFECTIVE, F.col("_prior.name").alias("resource_name")).join(
        topic_keys, ["cluster_id", "resource_name"])
    return sets.unionByName(state(deletes, "configs", False, {**key, "resource_type": F.lit(2)}))


def _client_quotas(x: Inputs) -> DataFrame:
    rec = x.rows("client_quota_record")
    entity = F.to_json(F.array_sort(F.transform("entity", lambda e: F.array(e["entity_type"], e["entity_name"]))))
    return state(rec, "client_quotas", ~F.col("remove"), {"entity": entity, "key": F.col("key")},
                 {"value": F.col("value")})


def _put_and_remove(kind: str, puts: DataFrame, removes: DataFrame, key: dict[str, Column],
                    values: dict[str, Column] | None = None) -> DataFrame:
    """States of a kind written by one record type and deleted by another (its Remove... record)."""
    values = values if values is not None else {c: F.col(c) for c in BY_NAME[kind].value_names}
    return state(puts, kind, True, key, values).unionByName(state(removes, kind, False, key))


def _acls(x: Inputs) -> DataFrame:
    return _put_and_remove("acls", x.rows("access_control_entry_record"),
                           x.rows("remove_access_control_entry_record"), {"acl_id": F.col("id")})


def _scram_users(x: Inputs) -> DataFrame:
    return _put_and_remove("scram_users", x.with_value_hash("user_scram_credential_record"),
                           x.rows("remove_user_scram_credential_record"),
                           {"mechanism": F.col("mechanism"), "name": F.col("name")},
                           {"iterations": F.col("iterations"), "credential_hash": F.col("value_hash")})


def _delegation_tokens(x: Inputs) -> DataFrame:
    return _put_and_remove("delegation_tokens", x.rows("delegation_token_record"),
                           x.rows("remove_delegation_token_record"), {"token_id": F.col("token_id")})


def _features(x: Inputs) -> DataFrame:
    # kraft.version FeatureLevel records are ignored (KAFKA-18979); level 0 removes, except metadata.version
    rec = x.rows("feature_level_record").filter(F.col("name") != "kraft.version")
    mv = F.col("name") == "metadata.version"
    key = {"name": F.col("name")}
    return state(rec, "features", mv | (F.col("feature_level") != 0), key, {
        "level": F.col("feature_level"),
        "version_name": F.when(mv, _lookup(x.enums["metadataVersion"], F.col("feature_level")))}).unionByName(
        state(x.rows("remove_feature_level_record"), "features", False, key))


def _producer_ids(x: Inputs) -> DataFrame:
    return state(x.rows("producer_ids_record"), "producer_ids", True, {},
                 {"next_producer_id": F.col("next_producer_id")})


def _kraft_version(x: Inputs) -> DataFrame:
    return state(x.rows("kraft_version", control=True), "kraft_version", True, {},
                 {"kraft_version": F.col("kraft_version")})


def _zk_migration_state(x: Inputs) -> DataFrame:
    rec = x.rows("zk_migration_state_record")
    return state(rec, "zk_migration_state", True, {}, {
        "state": F.col("zk_migration_state"),
        "state_name": _lookup(x.enums["zkMigrationState"], F.col("zk_migration_state"))})


def _voters(x: Inputs) -> DataFrame:
    """A VotersRecord replaces the set: its voters are set, the previous record's others deleted."""
    t = _types(BY_NAME["voters"])
    rec = x.rows("kraft_voters", control=True)
    sets = rec.select("cluster_id", *EFFECTIVE, F.explode("voters").alias("v"))
    ids = F.transform("voters", lambda v: v["voter_id"])
    w = Window.partitionBy("cluster_id").orderBy("eff_offset", "seq")
    gone = (rec.withColumn("_gone", F.array_except(F.lag(ids).over(w), ids))
            .select("cluster_id", *EFFECTIVE, F.explode("_gone").alias("voter_id")))
    return state(sets, "voters", True, {"voter_id": F.col("v.voter_id")}, {
        "directory_id": F.col("v.voter_directory_id"), "endpoints": _sorted(F.col("v.endpoints"), t["endpoints"]),
        "kraft_min_version": F.col("v.kraft_version_feature.min_supported_version"),
        "kraft_max_version": F.col("v.kraft_version_feature.max_supported_version")}).unionByName(
        state(gone, "voters", False, {"voter_id": F.col("voter_id")}))


# -- brokers: RegisterBroker replaces; changes, fence and unfence patch the registration of that epoch ---------

_BROKER_FIELDS = ("incarnation_id", "listeners", "supported_features", "rack", "fenced", "in_controlled_shutdown",
                  "is_migrating_zk_broker", "directories", "cordoned_directories")


def _brokers(x: Inputs) -> DataFrame:
    t = _types(BY_NAME["brokers"])

    def events(df: DataFrame, tag: str, broker: str, epoch: Column | None, **values: Column) -> DataFrame:
        return df.select("cluster_id", F.col(broker).alias("broker_id"), *EFFECTIVE, F.lit(tag).alias("tag"),
                         (epoch if epoch is not None else F.lit(None)).cast("long").alias("epoch"),
                         *[values.get(c, F.lit(None)).cast(t[c]).alias(c) for c in _BROKER_FIELDS])

    reg = events(x.rows("register_broker_record"), "R", "broker_id", F.col("broker_epoch"),
                 incarnation_id=F.col("incarnation_id"), listeners=_sorted("end_points", t["listeners"]),
                 supported_features=_sorted("features", t["supported_features"]), rack=F.col("rack"),
                 fenced=F.coalesce(F.col("fenced"), F.lit(True)),
                 in_controlled_shutdown=F.coalesce(F.col("in_controlled_shutdown"), F.lit(False)),
                 is_migrating_zk_broker=F.coalesce(F.col("is_migrating_zk_broker"), F.lit(False)),
                 directories=_sorted("log_dirs", t["directories"]), cordoned_directories=F.col("cordoned_log_dirs"))
    chg = x.rows("broker_registration_change_record")
    fencing, shutdown = F.coalesce(F.col("fenced"), F.lit(0)), F.coalesce(F.col("in_controlled_shutdown"), F.lit(0))
    change = events(chg.filter(fencing.isin(-1, 0, 1) & shutdown.isin(0, 1)), "B", "broker_id", F.col("broker_epoch"),
                    fenced=F.when(fencing == 1, True).when(fencing == -1, False),
                    in_controlled_shutdown=F.when(shutdown == 1, True),
                    directories=F.when(F.size(F.coalesce(F.col("log_dirs"), F.array())) > 0,
                                       F.array_sort("log_dirs")),
                    cordoned_directories=F.col("cordoned_log_dirs"))
    fence = events(x.rows("fence_broker_record"), "B", "id", F.col("epoch"), fenced=F.lit(True))
    unfence = events(x.rows("unfence_broker_record"), "B", "id", F.col("epoch"), fenced=F.lit(False))
    unreg = events(x.rows("unregister_broker_record"), "U", "broker_id", None)
    ev = reg.unionByName(change).unionByName(fence).unionByName(unfence).unionByName(unreg)

    keys = ["cluster_id", "broker_id"]
    w = Window.partitionBy(*keys).orderBy("eff_offset", "seq").rowsBetween(*RUNNING)
    ev = ev.withColumn("gen", F.sum(F.col("tag").isin("R", "U").cast("int")).over(w))
    wg = Window.partitionBy(*keys, "gen").orderBy("eff_offset", "seq").rowsBetween(*RUNNING)
    ev = (ev.withColumn("head", F.first("tag").over(wg)).withColumn("head_epoch", F.first("epoch").over(wg))
          .filter(F.col("tag").isin("R", "U") | ((F.col("head") == "R") & (F.col("epoch") == F.col("head_epoch")))))
    return state(ev, "brokers", F.col("tag") != "U", {"broker_id": F.col("broker_id")}, {
        "broker_epoch": F.col("head_epoch"),
        **{c: F.last(c, ignorenulls=True).over(wg) for c in _BROKER_FIELDS}})


# -- partitions: PartitionRecord replaces; PartitionChange and ClearElr merge; topics delete -------------------

_PARTITION_LISTS = ("replicas", "isr", "removing_replicas", "adding_replicas", "elr", "last_known_elr")


def _partitions(x: Inputs) -> DataFrame:
    t = _types(BY_NAME["partitions"])
    ints = t["replicas"]
    keys = ["cluster_id", "topic_id", "partition_id"]

    def events(df: DataFrame, tag: str, **values: Column) -> DataFrame:
        cols = (*_PARTITION_LISTS, "leader", "lrs", "le", "pe", "dirs", "topic_name", "bump", "given")
        kinds: dict[str, DataType | str] = {
            **{c: ints for c in _PARTITION_LISTS}, "leader": "int", "lrs": "tinyint", "le": "int", "pe": "int",
            "dirs": t["directories"], "topic_name": "string", "bump": "boolean", "given": "boolean"}
        return df.select(*keys, *EFFECTIVE, F.lit(tag).alias("tag"),
                         *[values.get(c, F.lit(None)).cast(kinds[c]).alias(c) for c in cols])

    explicit = F.when(F.size(F.coalesce(F.col("directories"), F.array())) > 0, F.col("directories"))
    pr = as_of(x.rows("partition_record"), x.topic_states, ["topic_id"], ["name"])
    heads = events(
        pr.filter(F.col("_prior.exists") & (explicit.isNull() | (F.size("directories") == F.size("replicas")))), "P",
        replicas=F.col("replicas"), isr=F.col("isr"), removing_replicas=F.col("removing_replicas"),
        adding_replicas=F.col("adding_replicas"), elr=F.coalesce("eligible_leader_replicas", F.array().cast(ints)),
        last_known_elr=F.coalesce("last_known_elr", F.array().cast(ints)), leader=F.col("leader"),
        lrs=F.coalesce("leader_recovery_state", F.lit(0)), le=F.col("leader_epoch"), pe=F.col("partition_epoch"),
        dirs=explicit, topic_name=F.col("_prior.name"), bump=F.lit(False), given=F.lit(True))
    pc = x.rows("partition_change_record")
    leader, lrs = F.coalesce("leader", F.lit(-2)), F.coalesce("leader_recovery_state", F.lit(-1))
    local_ok = lrs.isin(-1, 0, 1) & (explicit.isNull() | F.col("replicas").isNull()
                                      | (F.size("directories") == F.size("replicas")))
    changes = events(
        pc.filter(local_ok), "C", replicas=F.col("replicas"), isr=F.col("isr"),
        removing_replicas=F.col("removing_replicas"), adding_replicas=F.col("adding_replicas"),
        elr=F.col("eligible_leader_replicas"), last_known_elr=F.col("last_known_elr"),
        leader=F.when(leader != -2, leader), lrs=F.when(lrs != -1, lrs), dirs=explicit, bump=leader != -2,
        given=F.col("replicas").isNotNull())
    partition_keys = x.rows("partition_record").select(*keys).distinct()
    # ClearElr: every partition of the topics of that name (all topics when empty) that exist at that point
    ce = x.rows("clear_elr_record").select("cluster_id", *EFFECTIVE,
                                           F.coalesce("topic_name", F.lit("")).alias("ce_name"))
    named = as_of(ce.join(x.topic_states.select("cluster_id", "topic_id").distinct(), "cluster_id"),
                  x.topic_states, ["topic_id"], ["name"]).filter(
        F.col("_prior.exists") & ((F.col("ce_name") == "") | (F.col("_prior.name") == F.col("ce_name"))))
    clears = events(named.join(partition_keys, ["cluster_id", "topic_id"]), "E",
                    elr=F.array().cast(ints), last_known_elr=F.array().cast(ints), bump=F.lit(False))
    # a TopicRecord (a new TopicImage) or a RemoveTopicRecord drops the topic's partitions
    drops = events(x.topic_events.join(partition_keys, ["cluster_id", "topic_id"]), "D")
    ev = heads.unionByName(changes).unionByName(clears).unionByName(drops)

    w = Window.partitionBy(*keys).orderBy("eff_offset", "seq")
    ev = ev.withColumn("gen", F.sum(F.col("tag").isin("P", "D").cast("int")).over(w.rowsBetween(*RUNNING)))
    wgo = Window.partitionBy(*keys, "gen").orderBy("eff_offset", "seq")
    wg = wgo.rowsBetween(*RUNNING)
    ev = (ev.withColumn("head", F.first("tag").over(wg)).filter((F.col("tag") == "D") | (F.col("head") == "P"))
          .withColumn("replicas_now", F.last("replicas", ignorenulls=True).over(wg))
          # explicit directories without replicas must match the current replica count (else Kafka throws)
          .filter(F.col("dirs").isNull() | F.col("given") | (F.size("dirs") == F.size("replicas_now"))))
    now = {c: F.last(c, ignorenulls=True).over(wg) for c in (*_PARTITION_LISTS, "leader", "lrs")}
    ev = ev.select("*", *[v.alias(f"{c}_now") for c, v in now.items() if c != "replicas"],
                   F.first("topic_name").over(wg).alias("name_now"),
                   (F.first("le").over(wg) + F.sum(F.col("bump").cast("int")).over(wg)).alias("leader_epoch"))
    ev = ev.select("*", F.lag("replicas_now").over(wgo).alias("prev_replicas"),
                   F.lag("elr_now").over(wgo).alias("prev_elr"),
                   F.lag("last_known_elr_now").over(wgo).alias("prev_lke"))
    bumps = (F.col("tag") == "C") | ((F.col("tag") == "E") & ((F.size("prev_elr") > 0) | (F.size("prev_lke") > 0)))
    ev = ev.withColumn("partition_epoch", F.first("pe").over(wg) + F.sum(bumps.cast("int")).over(wg))
    ev = x.cache(ev)  # read twice: by the directories and by the join below
    ev = ev.join(_directories(ev, keys), [*keys, "gen", "eff_offset", "seq"], "left")
    return state(ev, "partitions", F.col("tag") != "D", {"topic_id": F.col("topic_id"),
                                                        "partition_id": F.col("partition_id")}, {
        "topic_name": F.col("name_now"), "replicas": F.col("replicas_now"), "isr": F.col("isr_now"),
        "removing_replicas": F.col("removing_replicas_now"), "adding_replicas": F.col("adding_replicas_now"),
        "elr": F.col("elr_now"), "last_known_elr": F.col("last_known_elr_now"), "leader": F.col("leader_now"),
        "leader_recovery_state": F.col("lrs_now"), "leader_epoch": F.col("leader_epoch"),
        "partition_epoch": F.col("partition_epoch"), "directories": F.col("directories")})


def _directories(ev: DataFrame, keys: list[str]) -> DataFrame:
    """Directory of each replica, per replica: the last explicit assignment since it joined the replicas.

    ``PartitionRegistration.merge``: explicit directories replace all; a replica change without them
    keeps each surviving replica's directory and gives new replicas UNASSIGNED
    (``DirectoryId.createDirectoriesFrom``); a PartitionRecord without them means MIGRATING.
    """
    per_replica = ev.filter(F.col("tag") != "D").select(
        *keys, "gen", *EFFECTIVE, "tag", "dirs", "given", "prev_replicas",
        F.posexplode("replicas_now").alias("pos", "replica"))
    defined = (F.when(F.col("dirs").isNotNull(), F.try_element_at("dirs", F.col("pos") + 1))
               .when(F.col("tag") == "P", F.lit(MIGRATING))
               .when(F.col("given") & ~F.coalesce(F.array_contains("prev_replicas", F.col("replica")), F.lit(False)),
                     F.lit(UNASSIGNED)))
    wr = Window.partitionBy(*keys, "gen", "replica").orderBy("eff_offset", "seq").rowsBetween(*RUNNING)
    return (per_replica.withColumn("dir", F.last(defined, ignorenulls=True).over(wr))
            .groupBy(*keys, "gen", "eff_offset", "seq")
            .agg(F.array_sort(F.collect_list(F.struct("pos", "dir"))).alias("_d"))
            .select(*keys, "gen", "eff_offset", "seq", F.transform("_d", lambda e: e["dir"]).alias("directories")))


BUILDERS: dict[str, Callable[[Inputs], DataFrame]] = {
    "brokers": _brokers, "controllers": _controllers, "topics": lambda x: x.topic_states,
    "partitions": _partitions, "configs": _configs, "client_quotas": _client_quotas, "acls": _acls,
    "scram_users": _scram_users, "delegation_tokens": _delegation_tokens, "features": _features,
    "producer_ids": _producer_ids, "voters": _voters, "kraft_version": _kraft_version,
    "zk_migration_state": _zk_migration_state,
}


def states(x: Inputs, kind: str) -> DataFrame:
    """State rows of one entity kind."""
    return BUILDERS[kind](x)


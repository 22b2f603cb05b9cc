"""ACLs and SCRAM users changed online through confluent-kafka's AdminClient.
Usage: acl_admin.py BOOTSTRAP [USER PASSWORD] PHASE ARGS...; prints one JSON line.
With USER and PASSWORD (given as user=NAME password=PW) the client logs in with
SASL_PLAINTEXT SCRAM-SHA-512; without, it is User:ANONYMOUS on PLAINTEXT.

grant USER TOPIC:   CreateAcls: USER may Write TOPIC; then DescribeAcls of everything.
revoke USER TOPIC:  DeleteAcls: every ACL of USER on TOPIC (literal); what was deleted.
describe:           DescribeAcls of everything.
user NAME PASSWORD: AlterUserScramCredentials (SCRAM-SHA-512, 4096 iterations); then
                    DescribeUserScramCredentials of every user.
users [NAME...]:    DescribeUserScramCredentials of every user, or of these.
Errors are printed as Kafka's error names, per item.
"""
import json
import sys

from confluent_kafka import KafkaException
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType,
                                   AdminClient, ResourcePatternType, ResourceType,
                                   ScramCredentialInfo, ScramMechanism,
                                   UserScramCredentialUpsertion)

args = sys.argv[1:]
config = {"bootstrap.servers": args.pop(0)}
while args and "=" in args[0]:
    key, value = args.pop(0).split("=", 1)
    config.update({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "SCRAM-SHA-512",
                   "sasl.username" if key == "user" else "sasl.password": value})
phase = args.pop(0)
admin = AdminClient(config)


def outcome(future):
    """The future's result, or the name of Kafka's error."""
    try:
        return future.result(timeout=30)
    except KafkaException as e:
        return {"error": e.args[0].name()}


def show(binding):
    return "{} {} {} {} {} {} {}".format(binding.principal, binding.permission_type.name,
                                        binding.operation.name, binding.host,
                                        binding.resource_pattern_type.name,
                                        binding.restype.name, binding.name)


def everything():
    f = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                         AclOperation.ANY, AclPermissionType.ANY)
    got = outcome(admin.describe_acls(f, request_timeout=30))
    return got if isinstance(got, dict) else sorted(show(b) for b in got)


def show_user(d):
    return [[i.mechanism.name, i.iterations] for i in d.scram_credential_infos]


def users(names=None):
    if names:
        got = admin.describe_user_scram_credentials(names)
        return {u: (lambda r: r if isinstance(r, dict) else show_user(r))(outcome(f))
                for u, f in got.items()}
    got = outcome(admin.describe_user_scram_credentials())
    if isinstance(got, dict) and "error" in got:
        return got
    return {u: show_user(d) for u, d in got.items()}


out = {}
if phase == "grant":
    user, topic = args
    binding = AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:" + user,
                         "*", AclOperation.WRITE, AclPermissionType.ALLOW)
    out["created"] = [outcome(f) for f in admin.create_acls([binding]).values()]
    out["acls"] = everything()
elif phase == "revoke":
    user, topic = args
    f = AclBindingFilter(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:" + user,
                         None, AclOperation.ANY, AclPermissionType.ANY)
    got = [outcome(x) for x in admin.delete_acls([f]).values()]
    out["deleted"] = [g if isinstance(g, dict) else [show(b) for b in g] for g in got]
elif phase == "describe":
    out["acls"] = everything()
elif phase == "user":
    name, password = args
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096)
    upsert = UserScramCredentialUpsertion(name, info, password.encode())
    out["altered"] = [outcome(f) for f in admin.alter_user_scram_credentials([upsert]).values()]
    out["users"] = users()
elif phase == "users":
    out["users"] = users(args)
else:
    raise SystemExit("unknown phase " + phase)
print(json.dumps(out))

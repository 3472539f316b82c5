"""The official Python client's TokenReview and SubjectAccessReview against rkube.

Usage: reviews.py KUBECONFIG TOKEN. Prints one JSON object with what the client
saw; crates/rkube/tests/python_client.rs asserts on it.
"""
import json
import sys

from kubernetes import client, config


def token_review(api, token):
    review = api.create_token_review(client.V1TokenReview(spec=client.V1TokenReviewSpec(token=token)))
    user = review.status.user
    return {
        "authenticated": review.status.authenticated,
        "username": user.username if user else None,
        "uid": user.uid if user else None,
        "groups": user.groups if user else None,
        "error": review.status.error,
    }


def access_review(api, verb):
    attrs = client.V1ResourceAttributes(verb=verb, resource="pods", namespace="default")
    spec = client.V1SubjectAccessReviewSpec(user="alice", resource_attributes=attrs)
    review = api.create_subject_access_review(client.V1SubjectAccessReview(spec=spec))
    return {"allowed": review.status.allowed, "denied": review.status.denied, "reason": review.status.reason}


def main():
    config.load_kube_config(config_file=sys.argv[1])
    authn = client.AuthenticationV1Api()
    authz = client.AuthorizationV1Api()
    print(json.dumps({
        "token": token_review(authn, sys.argv[2]),
        "bad_token": token_review(authn, "not-a-token"),
        "list_pods": access_review(authz, "list"),
        "delete_pods": access_review(authz, "delete"),
    }))


if __name__ == "__main__":
    main()

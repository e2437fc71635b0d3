"""Drop-in stores for agent frameworks, each an optional extra importing its framework only
in its own module (importing this package imports none of them):

- :mod:`runstore.adapters.openai_agents`: ``RunstoreSession``, an OpenAI Agents SDK
  ``Session`` on the agents service (the ``openai-agents`` extra);
- :mod:`runstore.adapters.langgraph`: ``RunstoreSaver``, a LangGraph checkpoint saver on the
  graph checkpoint store (the ``langgraph`` extra).
"""

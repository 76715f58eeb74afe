"""A hotel-booking agent whose tool calls a person reviews: LangGraph's "review tool calls"
human-in-the-loop example as a user writes it, drilled with a scripted reviewer (``--answer``).

``python -m killdrill.examples.hotel_review_langgraph --thread T --db PATH [--naive] [--request TEXT]``

``call_llm`` (a ``ChatOpenAI`` model with the ``book_hotel`` tool bound) -> ``human_review_node``,
which shows the tool call with ``interrupt()`` and acts on the reviewer's answer:
``{"action": "continue"}`` approves it, ``{"action": "update", "data": {...}}`` edits its
arguments, ``{"action": "feedback", "data": "..."}`` sends a note back to the model ->
``run_tool`` books -> ``call_llm`` confirms.  A ``SqliteSaver`` keeps the thread.

The driver is LangGraph's documented one: stream the request (or, when the thread has a
checkpoint, ``None``: resume) and print the updates.  The run stops at the review; a person
answers it with ``Command(resume=...)``.  Under a drill, ``--answer '{"action": "continue"}'`` is
that person (the LangGraph integration resumes the run with it); without an answer the drill says
in one line which interrupt is waiting.

``--naive`` is the planted bug: ``run_tool`` books with no idempotency key.  LangGraph re-runs a
node whose writes were not saved, so a kill after the booking and before ``run_tool``'s writes
commit (``after:run_tool``, ``during:tickets.create``) books the stay twice once the resumed run
reaches it again with the saved answer.  The default form keys the booking by what it is (the
thread, the hotel and the nights): the repeated request replays the first booking.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any, Literal

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.types import Command, interrupt

from killdrill.fakes import connect

DEFAULT_REQUEST = "Book Hotel Miramar for 3 nights, please."


def make_tool(thread: str, *, naive: bool) -> Any:
    fakes = connect()  # the booking API (the tickets fake: every create is a booking)

    @tool
    def book_hotel(hotel_name: str, nights: int) -> str:
        """Book a hotel room for a number of nights."""
        key = None if naive else f"{thread}:book_hotel:{hotel_name}:{nights}"
        booking = fakes.tickets.create(idempotency_key=key, hotel=hotel_name, nights=int(nights))
        return f"booking {booking['id']} confirmed at {hotel_name} for {nights} nights"

    return book_hotel


def build_graph(book_hotel: Any) -> Any:
    model = ChatOpenAI(model="gpt-4o-mini", temperature=0).bind_tools([book_hotel])

    def call_llm(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    def route_after_llm(state: MessagesState) -> Literal["human_review_node", "__end__"]:
        last = state["messages"][-1]
        if isinstance(last, AIMessage) and last.tool_calls:
            return "human_review_node"
        return "__end__"  # END, spelled as the annotation needs it

    def human_review_node(state: MessagesState) -> Command[Literal["call_llm", "run_tool"]]:
        last = state["messages"][-1]
        assert isinstance(last, AIMessage)
        tool_call = last.tool_calls[-1]
        review = interrupt({"question": "Is this correct?", "tool_call": tool_call})
        action, data = review["action"], review.get("data")
        if action == "continue":
            return Command(goto="run_tool")
        if action == "update":
            updated = AIMessage(
                content=last.content,
                tool_calls=[{**tool_call, "args": {**tool_call["args"], **data}}],
                id=last.id,  # the same id: the message is replaced, not appended
            )
            return Command(goto="run_tool", update={"messages": [updated]})
        note = ToolMessage(content=str(data), name=tool_call["name"], tool_call_id=tool_call["id"])
        return Command(goto="call_llm", update={"messages": [note]})

    def run_tool(state: MessagesState) -> dict[str, Any]:
        last = state["messages"][-1]
        assert isinstance(last, AIMessage)
        out = []
        for call in last.tool_calls:
            result = book_hotel.invoke(call["args"])
            out.append(ToolMessage(content=result, name=call["name"], tool_call_id=call["id"]))
        return {"messages": out}

    graph = StateGraph(MessagesState)
    graph.add_node(call_llm)
    graph.add_node(human_review_node)
    graph.add_node(run_tool)
    graph.add_edge(START, "call_llm")
    graph.add_conditional_edges("call_llm", route_after_llm)
    graph.add_edge("run_tool", "call_llm")
    return graph


def run(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m killdrill.examples.hotel_review_langgraph")
    parser.add_argument("--thread", required=True)
    parser.add_argument("--db", required=True, help="SQLite checkpoint file")
    parser.add_argument("--naive", action="store_true", help="book with no idempotency key")
    parser.add_argument("--request", default=DEFAULT_REQUEST)
    args = parser.parse_args(argv)

    config: Any = {"configurable": {"thread_id": args.thread}}
    with SqliteSaver.from_conn_string(args.db) as saver:
        graph = build_graph(make_tool(args.thread, naive=args.naive)).compile(checkpointer=saver)
        # Resume the thread when it has a checkpoint; passing the request again would start over.
        inputs: Any = None if saver.get_tuple(config) else {"messages": [HumanMessage(args.request)]}
        for update in graph.stream(inputs, config, stream_mode="updates"):
            print(update, flush=True)
        waiting = graph.get_state(config).interrupts
    if waiting:
        print(f"waiting for a review: {waiting[0].value}")
    return 0


if __name__ == "__main__":
    sys.exit(run())
